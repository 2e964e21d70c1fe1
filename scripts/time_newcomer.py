"""The newcomer's path, timed (a benchmark, not a test: it prints figures).

    python3 scripts/time_newcomer.py [--keep] [--empty-cache]

Clones this checkout's HEAD into a temporary directory, runs `make run` there
as a newcomer would (no DATABASE_URL, no SECRET_KEY: the embedded PostgreSQL
and the demo), and times three moments: the install done, the workspace's
login page served at /app/, and the demo banner printed. Then it signs in as
the demo owner through the login form, presses Ctrl-C (SIGINT to `make`'s
process group, as a terminal does) and checks that everything stopped: the
web server's port is closed and no PostgreSQL runs on the clone's data.
`--empty-cache` points uv at an empty cache (the figure with nothing
downloaded before). Needs ports 8000 and 8765-8771 free (no other `make run`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import requests

ROOT = Path(__file__).resolve().parents[1]
# The tools a newcomer has, found on the PATH once: absolute paths from here on.
GIT, MAKE, PS = (shutil.which(tool) or tool for tool in ("git", "make", "ps"))
BASE = "http://127.0.0.1:8000"


def _postgres_running(data_dir: Path) -> bool:
    out = subprocess.run([PS, "-eo", "args"], capture_output=True, text=True).stdout  # noqa: S603 - our arguments
    return any("postgres" in line and str(data_dir) in line for line in out.splitlines())


def _login_page_served() -> bool:
    try:
        response = requests.get(f"{BASE}/app/", timeout=2)
    except requests.RequestException:
        return False
    return response.status_code == 200 and 'name="password"' in response.text


def _sign_in(username: str, password: str) -> bool:
    session = requests.Session()
    page = session.get(f"{BASE}/app/", timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    if token is None:
        return False
    response = session.post(
        page.url,
        data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password, "next": "/app/"},
        headers={"Referer": page.url},
        timeout=10,
    )
    # Signed in, /app/ sends a setter or an owner on to their page inside it.
    path = urlsplit(response.url).path
    return response.status_code == 200 and path.startswith("/app/") and "login" not in path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the clone behind")
    parser.add_argument("--empty-cache", action="store_true", help="install with an empty uv cache")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="leadops-newcomer-"))
    clone = work / "leadops"
    subprocess.run([GIT, "clone", "-q", str(ROOT), str(clone)], check=True)  # noqa: S603 - our arguments
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "SECRET_KEY", "REDIS_URL", "VIRTUAL_ENV"}}
    if args.empty_cache:
        env["UV_CACHE_DIR"] = str(work / "uv-cache")
    log_path = work / "make-run.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        make = subprocess.Popen(  # noqa: S603 - our arguments
            [MAKE, "run"], cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    marks: dict[str, float] = {}
    signed_in = False
    try:
        while time.monotonic() - started < args.timeout and make.poll() is None:
            elapsed = time.monotonic() - started
            if "installed" not in marks and (clone / ".venv" / ".installed").exists():
                marks["installed"] = elapsed
            if "login" not in marks and _login_page_served():
                marks["login"] = elapsed
            if "banner" not in marks and "LeadOps is up" in log_path.read_text(errors="replace"):
                marks["banner"] = elapsed
            if {"login", "banner"} <= marks.keys():
                break
            time.sleep(0.25)
        if {"login", "banner"} <= marks.keys():
            signed_in = _sign_in("olivia", "olivia-leadops-demo")
            time.sleep(2)  # what the processes print once the banner is out
    finally:
        tail_before_stop = log_path.read_text(errors="replace").rstrip().splitlines()[-8:]
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGINT)
        try:
            make.wait(timeout=60)
            stopped_in = "yes"
        except subprocess.TimeoutExpired:
            # What did not stop, for the figures' reader to chase.
            group = subprocess.run([PS, "-o", "pid=,stat=,etime=,args=", "-g", str(make.pid)], capture_output=True)  # noqa: S603
            stopped_in = "no (killed); left running:\n" + group.stdout.decode(errors="replace").rstrip()
            os.killpg(make.pid, signal.SIGKILL)
    time.sleep(1)
    port_closed = not _login_page_served()
    pg_left = _postgres_running(clone / ".data" / "pg")
    print(f"clone: {clone}")
    for name in ("installed", "login", "banner"):
        figure = f"{marks[name]:6.1f} s" if name in marks else "   never"
        print(f"  {name:<10} {figure}")
    print(f"  signed in as the demo owner at /app/: {'yes' if signed_in else 'no'}")
    print(
        f"  Ctrl-C: make exited: {stopped_in}; web port closed: {'yes' if port_closed else 'no'}; "
        f"embedded PostgreSQL left running: {'yes' if pg_left else 'no'}"
    )
    print("  last lines before Ctrl-C:")
    for line in tail_before_stop:
        print(f"    | {line}")
    if pg_left:
        subprocess.run([MAKE, "stop-db"], cwd=clone, env=env, capture_output=True)  # noqa: S603 - our arguments
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    ok = signed_in and port_closed and not pg_left and "banner" in marks
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
