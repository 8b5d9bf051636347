<?php
// RosterAgent: a PHP client of `roster agent` with nothing but curl.
//
// The agent is the long-running process of the host that keeps the
// registry's lists for every PHP-FPM worker: a worker asks it for one
// instance (pick), calls it, and reports the outcome (report), which
// feeds the agent's load balancing and quarantine for all the workers.
//
// If the agent cannot be reached, the client falls back to the last list
// it saved for the service (a JSON file, written atomically), so a
// restart of the agent costs no call. The saved list is filtered as the
// agent would filter it (version, zone, tags, endpoint). An answer of the agent is
// never overridden by the saved list: an error it answers (503
// no_instances, stale, ...) is thrown as a RosterAgentError with its code,
// since the agent knows better than a file that may be minutes old.

/** An error the agent answered: $agentCode is its code (no_instances, stale, invalid, ...). */
final class RosterAgentError extends RuntimeException
{
    public function __construct(string $message, public readonly string $agentCode, public readonly int $status)
    {
        parent::__construct($message);
    }
}

final class RosterAgent
{
    private string $base;
    private ?string $socket = null;
    /** Seconds a pick waits for the agent when no list of the service is saved. */
    public const COLD_TIMEOUT = 2.0;

    /** Whether the latest pick came from the saved list (the agent was down). */
    public bool $lastFallback = false;

    /**
     * @param string $agent    "http://127.0.0.1:7946" or "unix:/run/roster.sock"
     * @param string $cacheDir where the last list of each service is kept
     * @param float  $timeout  seconds for a request to the agent (it is local: keep it short)
     * @param int    $refresh  seconds between refreshes of the saved list
     */
    public function __construct(string $agent, private string $cacheDir, private float $timeout = 0.25, private int $refresh = 5)
    {
        if (str_starts_with($agent, 'unix:')) {
            $this->socket = substr($agent, 5);
            $this->base = 'http://localhost';
        } else {
            $this->base = rtrim($agent, '/');
        }
    }

    /**
     * Picks an instance of $service. $opts: strategy, key, version, zone, tags,
     * endpoint (the port to call by name, such as "grpc": only instances that serve it).
     * Returns ['instance' => [...], 'endpoint' => ['name', 'address', ...], 'token' => string|null,
     * 'fallback' => bool]; call the endpoint's address.
     * Throws RosterAgentError when the agent answers an error.
     */
    public function pick(string $service, array $opts = []): array
    {
        $this->lastFallback = false;
        // With no saved list to fall back on, a slow answer beats none: an
        // agent's first pick of a service waits for the registry.
        $timeout = is_file($this->listFile($service)) ? 0 : max($this->timeout, self::COLD_TIMEOUT);
        [$status, $body] = $this->request('POST', '/v1/pick', ['service' => $service] + $opts, $timeout);
        if ($status === 200 && isset($body['instance']['address'])) {
            $this->saveList($service);
            $endpoint = $body['endpoint'] ?? self::endpoint($body['instance'], (string)($opts['endpoint'] ?? ''));
            return ['instance' => $body['instance'], 'endpoint' => $endpoint, 'token' => $body['token'] ?? null, 'fallback' => false];
        }
        if ($status !== 0 && isset($body['code']) && is_string($body['code'])) {
            // The agent answered: its list is newer than ours, and its
            // no_instances or stale is the truth about the service.
            throw new RosterAgentError("roster agent: pick $service: $status {$body['code']}: " . ($body['error'] ?? ''), $body['code'], $status);
        }
        // No answer, or one that is not the agent's (a proxy's error page):
        // the agent cannot be reached, so the last list we saved, filtered.
        $this->lastFallback = true;
        $list = self::matching($this->loadList($service), $opts);
        if (!$list) {
            throw new RuntimeException("roster agent unreachable (status $status) and no saved instance of $service matches " . json_encode(array_diff_key($opts, ['strategy' => 0, 'key' => 0])));
        }
        // A retry goes to an instance not tried yet while there is one.
        $fresh = array_values(array_filter($list, fn($in) => !in_array($in['id'] ?? null, (array)($opts['tried'] ?? []), true)));
        $in = self::weightedRandom($fresh ?: $list);
        return ['instance' => $in, 'endpoint' => self::endpoint($in, (string)($opts['endpoint'] ?? '')), 'token' => null, 'fallback' => true];
    }

    /** Returns the instances of $list that the pick filters of $opts (version, zone, tags, endpoint) accept. */
    private static function matching(array $list, array $opts): array
    {
        $tags = (array)($opts['tags'] ?? []);
        $endpoint = (string)($opts['endpoint'] ?? '');
        return array_values(array_filter($list, function ($in) use ($opts, $tags, $endpoint): bool {
            if (!is_array($in) || !isset($in['address'])) {
                return false;
            }
            foreach (['version', 'zone'] as $f) {
                if (($opts[$f] ?? '') !== '' && ($in[$f] ?? '') !== $opts[$f]) {
                    return false;
                }
            }
            return !array_diff($tags, (array)($in['tags'] ?? [])) && self::endpoint($in, $endpoint) !== null;
        }));
    }

    /**
     * Returns the endpoint of $in called $name, by the agent's rule (Go's
     * Instance.Endpoint): "" is the primary, address; so is a name $in does
     * not announce, unless its primary is named itself, when it serves no
     * such name (null).
     */
    public static function endpoint(array $in, string $name): ?array
    {
        $primaryNamed = false;
        foreach ((array)($in['endpoints'] ?? []) as $e) {
            if ($name !== '' && is_array($e) && ($e['name'] ?? null) === $name && isset($e['address'])) {
                return $e;
            }
            if (is_array($e) && ($e['address'] ?? null) === $in['address']) {
                $primaryNamed = true;
            }
        }
        return $name !== '' && $primaryNamed ? null : ['name' => '', 'address' => $in['address']];
    }

    /** Reports the outcome of a picked call: success, business, failure, fatal or abort. */
    public function report(?string $token, string $outcome, float $latencyMs): void
    {
        if ($token === null) {
            return; // picked from the saved list: nothing to report to
        }
        $this->request('POST', '/v1/report', ['token' => $token, 'outcome' => $outcome, 'latency_ms' => $latencyMs]);
    }

    /**
     * Runs $call(array $instance) on an instance of $service, retrying on
     * another one when it throws, up to $attempts; reports every attempt.
     * With an endpoint in $opts, $instance['address'] is that endpoint's.
     */
    public function call(string $service, callable $call, array $opts = [], int $attempts = 3): mixed
    {
        $last = null;
        $tried = []; // the agent sends a retry to an instance not tried yet
        for ($i = 0; $i < $attempts; $i++) {
            $p = $this->pick($service, $tried ? $opts + ['tried' => $tried] : $opts);
            $start = hrtime(true);
            try {
                $result = $call(['address' => $p['endpoint']['address']] + $p['instance']);
                $this->report($p['token'], 'success', (hrtime(true) - $start) / 1e6);
                return $result;
            } catch (Throwable $e) {
                $this->report($p['token'], 'failure', (hrtime(true) - $start) / 1e6);
                $last = $e;
                if (isset($p['instance']['id'])) {
                    $tried[] = $p['instance']['id'];
                }
            }
        }
        throw $last;
    }

    /** @return array{0:int,1:?array} the HTTP status (0: no answer) and the decoded body */
    private function request(string $method, string $path, ?array $body = null, float $timeout = 0): array
    {
        $ch = curl_init($this->base . $path);
        $opts = [
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_TIMEOUT_MS => (int)(($timeout ?: $this->timeout) * 1000),
            CURLOPT_CONNECTTIMEOUT_MS => (int)($this->timeout * 1000),
            CURLOPT_HTTPHEADER => ['Content-Type: application/json'],
        ];
        if ($body !== null) {
            $opts[CURLOPT_POSTFIELDS] = json_encode($body);
        }
        if ($this->socket !== null) {
            $opts[CURLOPT_UNIX_SOCKET_PATH] = $this->socket;
        }
        curl_setopt_array($ch, $opts);
        $raw = curl_exec($ch);
        $status = $raw === false ? 0 : curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
        curl_close($ch);
        return [$status, is_string($raw) ? json_decode($raw, true) : null];
    }

    private function listFile(string $service): string
    {
        return $this->cacheDir . '/roster-' . preg_replace('/[^a-z0-9._-]/', '_', $service) . '.json';
    }

    /** Saves the agent's list of $service, at most every $refresh seconds. */
    private function saveList(string $service): void
    {
        $file = $this->listFile($service);
        $mtime = @filemtime($file);
        if ($mtime !== false && time() - $mtime < $this->refresh) {
            return;
        }
        [$status, $body] = $this->request('GET', '/v1/services/' . rawurlencode($service));
        if ($status !== 200 || empty($body['instances'])) {
            return;
        }
        $tmp = $file . '.' . getmypid() . '.tmp';
        if (file_put_contents($tmp, json_encode($body['instances'])) !== false) {
            rename($tmp, $file); // atomic: a reader sees the old list or the new one
        }
    }

    private function loadList(string $service): array
    {
        $raw = @file_get_contents($this->listFile($service));
        $list = $raw === false ? null : json_decode($raw, true);
        return is_array($list) ? $list : [];
    }

    private static function weightedRandom(array $list): array
    {
        $total = 0;
        foreach ($list as $in) {
            $total += max(0, (int)($in['weight'] ?? 0));
        }
        if ($total === 0) {
            return $list[array_rand($list)];
        }
        $r = random_int(1, $total);
        foreach ($list as $in) {
            $r -= max(0, (int)($in['weight'] ?? 0));
            if ($r <= 0) {
                return $in;
            }
        }
        return end($list);
    }
}
