<?php
// A PHP worker of the chaos suite's agent path: for every line read on
// stdin it makes one call through roster agent with the example client
// (pick, GET the instance, report; up to 3 attempts) and prints one line:
// "ok <instance id>" or "failed <error>". The Go test counts them.
//
//   php worker.php SERVICE
//   env: ROSTER_AGENT, ROSTER_CACHE_DIR

require __DIR__ . '/../../examples/php/RosterAgent.php';

$service = $argv[1];
$agent = new RosterAgent(getenv('ROSTER_AGENT'), getenv('ROSTER_CACHE_DIR'));

// The same attempt as the Go callers': 1 s, any answer but 200 a failure.
$get = function (array $in): string {
    $ch = curl_init('http://' . $in['address'] . '/');
    curl_setopt_array($ch, [CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT_MS => 1000]);
    $body = curl_exec($ch);
    $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
    $err = curl_error($ch);
    curl_close($ch);
    if ($body === false || $status !== 200) {
        throw new RuntimeException("{$in['address']}: " . ($err ?: "status $status"));
    }
    return $body;
};

while (fgets(STDIN) !== false) {
    try {
        $id = $agent->call($service, $get);
        echo "ok $id\n";
    } catch (Throwable $e) {
        echo 'failed ', strtr($e->getMessage(), "\n", ' '), "\n";
    }
    fflush(STDOUT);
}
