<?php
// Calls a service N times through roster agent: pick, call over HTTP,
// report. One line per call: "ok <instance id> <answer>",
// "fallback <instance id> <answer>" when the agent was down and the last
// saved list served the pick, or "failed <error>".
//
//   php client.php SERVICE [CALLS] [version=v2] [zone=hz-1] [tags=a,b] [strategy=…] [key=…]
//   env: ROSTER_AGENT (default http://127.0.0.1:7946), ROSTER_CACHE_DIR (default the temp dir)

require __DIR__ . '/RosterAgent.php';

$service = $argv[1] ?? 'api';
$calls = (int)($argv[2] ?? 10);
$opts = [];
foreach (array_slice($argv, 3) as $arg) {
    [$k, $v] = explode('=', $arg, 2) + [1 => ''];
    $opts[$k] = $k === 'tags' ? explode(',', $v) : $v;
}
$agent = new RosterAgent(getenv('ROSTER_AGENT') ?: 'http://127.0.0.1:7946', getenv('ROSTER_CACHE_DIR') ?: sys_get_temp_dir());

$httpGet = function (array $instance): string {
    $ch = curl_init('http://' . $instance['address'] . '/');
    curl_setopt_array($ch, [CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT_MS => 1000, CURLOPT_CONNECTTIMEOUT_MS => 200]);
    $body = curl_exec($ch);
    $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
    $err = curl_error($ch);
    curl_close($ch);
    if ($body === false || $status >= 500) {
        throw new RuntimeException("{$instance['address']}: " . ($err ?: "status $status"));
    }
    return $body;
};

$failed = 0;
for ($i = 0; $i < $calls; $i++) {
    $picked = null;
    try {
        $answer = $agent->call($service, function (array $in) use ($httpGet, &$picked) {
            $picked = $in;
            return $httpGet($in);
        }, $opts);
        echo ($agent->lastFallback ? 'fallback' : 'ok'), ' ', $picked['id'], ' ', trim($answer), "\n";
    } catch (Throwable $e) {
        $failed++;
        echo 'failed ', $e->getMessage(), "\n";
    }
}
exit($failed > 0 ? 1 : 0);
