"""MCP calls under gevent's monkey-patching (gunicorn's gevent worker): they work over stdio and HTTP, and a call that
waits parks only its own greenlet (agents/tools/mcp/bridge.py explains how)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration._support import ROOT, clean_env
from tests.support.mcp_fixtures import HttpServer, stdio_server

SCRIPT = """
from gevent import monkey; monkey.patch_all()
import json, os, time, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
django.setup()
import gevent
from agents.runs import runtime
from agents.engine.dispatch import Toolset, run_tool
from agents.tools import mcp
from agents.tools.mcp import stdio as mcp_stdio

ticks = [0]
def ticker():
    while True:
        gevent.sleep(0.01)
        ticks[0] += 1
gevent.spawn(ticker)

toolset = Toolset(runtime.run_tools(["t.echo", "t.slow", "h.echo", "h.slow", "down.echo"]))
def call(name, arguments, timeout_s=5.0):
    result = run_tool(toolset, name, arguments, timeout_s)
    return [result.output, result.is_error]

out = {"echo": call("t.echo", {"text": "stdio"}), "http": call("h.echo", {"text": "http"})}
before, started = ticks[0], time.monotonic()
jobs = [gevent.spawn(call, name, {"seconds": 0.5}) for name in ("t.slow", "h.slow") for _ in range(5)]
gevent.joinall(jobs, timeout=10)
out["slow"] = [job.value for job in jobs]
out["slow_s"] = time.monotonic() - started
out["ticks_while_waiting"] = ticks[0] - before
started = time.monotonic()
out["timeout"] = call("t.slow", {"seconds": 5}, timeout_s=0.5)
out["timeout_s"] = time.monotonic() - started
out["down"] = call("down.echo", {"text": "x"})
pids = [child.pid for child in mcp_stdio.LIVE]
mcp.shutdown()
alive = []
for pid in pids:
    try:
        os.kill(pid, 0)
        alive.append(pid)
    except ProcessLookupError:
        pass
out["alive_after_shutdown"] = alive
print(json.dumps(out))
"""


def test_mcp_calls_under_gevent_park_only_their_greenlet(tmp_path):
    http = HttpServer().start()
    try:
        # A host name, not an address: resolving it runs in the loop's executor (OS threads, not greenlets).
        local = {"name": "h", "url": http.url.replace("127.0.0.1", "localhost")}
        servers = [stdio_server("t"), local, {"name": "down", "url": "http://127.0.0.1:9/mcp"}]
        env = clean_env(
            DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path / 'g.sqlite3'}", AGENT_MCP_SERVERS=json.dumps(servers)
        )
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90, check=False
        )
    finally:
        http.stop()

    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["echo"] == ["stdio", False] and out["http"] == ["http", False]
    assert out["slow"] == [["slept 0.5", False]] * 10
    assert out["slow_s"] < 2.0  # ten calls of 0.5 s at once, not one after another
    assert out["ticks_while_waiting"] >= 10  # the other greenlets ran while the calls waited
    assert out["timeout"][1] is True and "timed out" in out["timeout"][0] and out["timeout_s"] < 2.0
    assert out["down"][1] is True and "MCP server 'down'" in out["down"][0]
    assert out["alive_after_shutdown"] == []
