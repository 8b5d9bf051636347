#!/usr/bin/env python3
"""A client of `roster agent` with the Python 3 standard library only.

pick an instance, call it, report the outcome by token. If the agent
cannot be reached, fall back to the last list saved for the service (a
JSON file, replaced atomically), filtered as the agent filters (version,
zone, tags, endpoint). An error the agent answers (503 no_instances, stale, ...) is
raised as AgentError with its code, never served from the saved list:
the agent knows better than a file that may be minutes old.

    python3 roster_agent.py SERVICE [CALLS] [version=v2] [zone=hz-1] [tags=a,b] [endpoint=http] [strategy=...] [key=...]
    env: ROSTER_AGENT (default http://127.0.0.1:7946), ROSTER_CACHE_DIR (default the temp dir)

Prints one line per call: "ok <instance id> <answer>", "fallback ..."
when the saved list served the pick, or "failed <error>".
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


class AgentError(RuntimeError):
    """An error the agent answered: code is its code (no_instances, stale, invalid, ...)."""

    def __init__(self, message, code, status):
        super().__init__(message)
        self.code = code
        self.status = status


def endpoint(instance, name=""):
    """The endpoint of instance called name, by the agent's rule (Go's Instance.Endpoint).

    "" is the primary, address; so is a name the instance does not
    announce, unless its primary is named itself: then it serves no such
    name (None)."""
    primary_named = False
    for e in instance.get("endpoints") or []:
        if not isinstance(e, dict):
            continue
        if name and e.get("name") == name and e.get("address"):
            return e
        if e.get("address") == instance["address"]:
            primary_named = True
    return None if name and primary_named else {"name": "", "address": instance["address"]}


def matching(instances, version="", zone="", tags=(), endpoint_name="", **_):
    """The instances the pick filters accept, as the agent applies them."""
    return [i for i in instances
            if isinstance(i, dict) and i.get("address")
            and (not version or i.get("version") == version)
            and (not zone or i.get("zone") == zone)
            and all(t in (i.get("tags") or []) for t in tags)
            and endpoint(i, endpoint_name) is not None]


# Seconds a pick waits for the agent when no list of the service is saved.
COLD_TIMEOUT = 2.0


class RosterAgent:
    def __init__(self, agent, cache_dir, timeout=0.25, refresh=5):
        self.base = agent.rstrip("/")
        self.cache_dir = cache_dir
        self.timeout = timeout
        self.refresh = refresh
        self.last_fallback = False

    def _request(self, method, path, body=None, timeout=None):
        """Returns (status, decoded body); status 0 when the agent did not answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
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
        """Returns (instance, token, fallback). opts: strategy, key, version, zone, tags, endpoint.

        With endpoint (a port's name, such as "grpc") only instances that
        serve it are picked, and the instance's "address" is that
        endpoint's (the record's own is in "endpoints"). Raises AgentError
        when the agent answers an error."""
        self.last_fallback = False
        # With no saved list to fall back on, a slow answer beats none: an
        # agent's first pick of a service waits for the registry.
        timeout = None if os.path.exists(self._list_file(service)) else max(self.timeout, COLD_TIMEOUT)
        status, body = self._request("POST", "/v1/pick", dict(service=service, **opts), timeout)
        name = opts.get("endpoint", "")
        if status == 200 and isinstance(body, dict) and isinstance(body.get("instance"), dict):
            self._save_list(service)
            e = body.get("endpoint") or endpoint(body["instance"], name)
            return dict(body["instance"], address=e["address"]), body.get("token"), False
        if status != 0 and isinstance(body, dict) and isinstance(body.get("code"), str):
            # The agent answered: its no_instances or stale is the truth.
            raise AgentError("roster agent: pick %s: %d %s: %s" % (service, status, body["code"], body.get("error", "")),
                             body["code"], status)
        # No answer, or one that is not the agent's (a proxy's error page).
        self.last_fallback = True
        instances = matching(self._load_list(service), endpoint_name=name, **opts)
        if not instances:
            raise RuntimeError("roster agent unreachable (status %d) and no saved instance of %s matches %s"
                               % (status, service, {k: v for k, v in opts.items() if k not in ("strategy", "key")}))
        # A retry goes to an instance not tried yet while there is one.
        instances = [i for i in instances if i.get("id") not in opts.get("tried", ())] or instances
        weights = [max(0, int(i.get("weight", 0))) for i in instances]
        if sum(weights) == 0:
            chosen = random.choice(instances)
        else:
            chosen = random.choices(instances, weights=weights)[0]
        return dict(chosen, address=endpoint(chosen, name)["address"]), None, True

    def report(self, token, outcome, latency_ms):
        if token is not None:
            self._request("POST", "/v1/report", {"token": token, "outcome": outcome, "latency_ms": latency_ms})

    def call(self, service, fn, attempts=3, **opts):
        """Runs fn(instance), retrying on another instance when it raises."""
        last = None
        tried = []  # the agent sends a retry to an instance not tried yet
        for _ in range(attempts):
            instance, token, _ = self.pick(service, **dict(opts, tried=tried) if tried else opts)
            start = time.perf_counter()
            try:
                result = fn(instance)
            except Exception as e:  # the instance failed: report it, try another
                self.report(token, "failure", (time.perf_counter() - start) * 1000)
                last = e
                if instance.get("id"):
                    tried.append(instance["id"])
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
    opts = {}
    for arg in sys.argv[3:]:
        k, _, v = arg.partition("=")
        opts[k] = v.split(",") if k == "tags" else v
    agent = RosterAgent(os.environ.get("ROSTER_AGENT", "http://127.0.0.1:7946"),
                        os.environ.get("ROSTER_CACHE_DIR", tempfile.gettempdir()))
    failed = 0
    for _ in range(calls):
        try:
            instance, answer = agent.call(service, http_get, **opts)
            print("fallback" if agent.last_fallback else "ok", instance["id"], answer.strip(), flush=True)
        except Exception as e:
            failed += 1
            print("failed", e, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
