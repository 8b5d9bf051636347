#!/usr/bin/env python3
"""A client of `roster agent` with the Python 3 standard library only.

pick an instance, call it, report the outcome by token; if the agent is
down, fall back to the last list saved for the service (a JSON file,
replaced atomically).

    python3 roster_agent.py SERVICE [CALLS]
    env: ROSTER_AGENT (default http://127.0.0.1:7946), ROSTER_CACHE_DIR (default the temp dir)

Prints one line per call: "ok <instance id> <answer>", or "fallback ..."
when the saved list served the pick.
"""

import json
import os
import random
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request


class RosterAgent:
    def __init__(self, agent, cache_dir, timeout=0.25, refresh=5):
        self.base = agent.rstrip("/")
        self.cache_dir = cache_dir
        self.timeout = timeout
        self.refresh = refresh
        self.last_fallback = False

    def _request(self, method, path, body=None):
        """Returns (status, decoded body); status 0 when the agent did not answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            try:
                return e.code, json.loads(e.read())
            except ValueError:
                return e.code, None
        except (urllib.error.URLError, OSError, ValueError):
            return 0, None

    def _list_file(self, service):
        return os.path.join(self.cache_dir, "roster-" + re.sub(r"[^a-z0-9._-]", "_", service) + ".json")

    def _save_list(self, service):
        path = self._list_file(service)
        try:
            if time.time() - os.path.getmtime(path) < self.refresh:
                return
        except OSError:
            pass
        status, body = self._request("GET", "/v1/services/" + urllib.request.quote(service))
        if status != 200 or not body or not body.get("instances"):
            return
        fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".roster-")
        with os.fdopen(fd, "w") as f:
            json.dump(body["instances"], f)
        os.replace(tmp, path)  # atomic: a reader sees the old list or the new one

    def _load_list(self, service):
        try:
            with open(self._list_file(service)) as f:
                data = json.load(f)
            return data if isinstance(data, list) else []
        except (OSError, ValueError):
            return []

    def pick(self, service, **opts):
        """Returns (instance, token, fallback). opts: strategy, key, version, zone, tags."""
        status, body = self._request("POST", "/v1/pick", dict(service=service, **opts))
        self.last_fallback = status != 200
        if status == 200:
            self._save_list(service)
            return body["instance"], body["token"], False
        if status != 0 and status < 500:
            raise ValueError("roster agent: pick %s: %s" % (service, (body or {}).get("error", status)))
        instances = self._load_list(service)
        if not instances:
            raise RuntimeError("roster agent unreachable and no saved list for " + service)
        weights = [max(0, int(i.get("weight", 0))) for i in instances]
        if sum(weights) == 0:
            return random.choice(instances), None, True
        return random.choices(instances, weights=weights)[0], None, True

    def report(self, token, outcome, latency_ms):
        if token is not None:
            self._request("POST", "/v1/report", {"token": token, "outcome": outcome, "latency_ms": latency_ms})

    def call(self, service, fn, attempts=3, **opts):
        """Runs fn(instance), retrying on another instance when it raises."""
        last = None
        for _ in range(attempts):
            instance, token, _ = self.pick(service, **opts)
            start = time.perf_counter()
            try:
                result = fn(instance)
            except Exception as e:  # the instance failed: report it, try another
                self.report(token, "failure", (time.perf_counter() - start) * 1000)
                last = e
                continue
            self.report(token, "success", (time.perf_counter() - start) * 1000)
            return instance, result
        raise last


def http_get(instance):
    with urllib.request.urlopen("http://%s/" % instance["address"], timeout=1) as resp:
        return resp.read().decode()


def main():
    service = sys.argv[1] if len(sys.argv) > 1 else "api"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    agent = RosterAgent(os.environ.get("ROSTER_AGENT", "http://127.0.0.1:7946"),
                        os.environ.get("ROSTER_CACHE_DIR", tempfile.gettempdir()))
    failed = 0
    for _ in range(calls):
        try:
            instance, answer = agent.call(service, http_get)
            print("fallback" if agent.last_fallback else "ok", instance["id"], answer.strip(), flush=True)
        except Exception as e:
            failed += 1
            print("failed", e, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
