"""A real origin for the cache e2e: Debian's nginx serving a directory on 127.0.0.1.

Owns writing an nginx configuration into a temporary directory (one process, no daemon, every
path it writes inside that directory, so it runs with or without root), starting it, waiting
until it answers, and stopping exactly the process it started. The locations a cache test needs
answer with their own freshness headers:

- `/short/`: `Cache-Control: max-age=1, stale-while-revalidate=0` (expires at once; a later
  request revalidates synchronously, or is served stale when the origin is gone);
- `/swr/`: `Cache-Control: max-age=1` (the cache route's stale-while-revalidate applies);
- `/slow/`: sent at `slow_rate` bytes/s per connection (a fill others can join);
- `/broken/`: `503` for every request (an origin error);
- everything else: the files as they are (ETag and Last-Modified, so 304 on a conditional).

It asserts nothing about the cache in front of it.
"""

import pathlib
import shutil
import subprocess

from lib import stack


def ensure_nginx():
    """The nginx binary; installs Debian's nginx-light when it is missing (as scripts/deps.sh)."""
    exe = shutil.which("nginx") or ("/usr/sbin/nginx" if pathlib.Path("/usr/sbin/nginx").exists()
                                    else None)
    if exe is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "nginx-light"],
                       check=True, env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/bin:/bin"})
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
    return exe


def _compiled_out(exe):
    """Modules nginx was built without (`--without-http_NAME_module`), from `nginx -V`."""
    out = subprocess.run([exe, "-V"], capture_output=True, text=True).stderr
    return {w[len("--without-http_"):-len("_module")] for w in out.split()
            if w.startswith("--without-http_") and w.endswith("_module")}


class NginxOrigin:
    """nginx serving `root` on a free 127.0.0.1 port; `url` is its base URL."""

    def __init__(self, tmp, root, slow_rate="64k"):
        exe = ensure_nginx()
        self.port = stack.free_port()
        tmp = pathlib.Path(tmp)
        run = tmp / "nginx"
        run.mkdir()
        # Temp paths of every compiled-in module that has one, inside `run` (the defaults are
        # under /var/lib/nginx, which a non-root nginx cannot create).
        temps = "".join(f"  {m}_temp_path {run / m};\n"
                        for m in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
                        if m == "client_body" or m not in _compiled_out(exe))
        conf = run / "nginx.conf"
        conf.write_text(f"""daemon off;
master_process off;
worker_processes 1;
pid {run / 'nginx.pid'};
error_log {run / 'error.log'} warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
{temps}  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{self.port};
    root {root};
    location /short/ {{ add_header Cache-Control "max-age=1, stale-while-revalidate=0" always; }}
    location /swr/ {{ add_header Cache-Control "max-age=1" always; }}
    location /slow/ {{ limit_rate {slow_rate}; }}
    location /broken/ {{ return 503; }}
  }}
}}
""")
        self.proc = stack.Proc([exe, "-p", str(run), "-e", str(run / "error.log"), "-c", str(conf)],
                               run / "stdout.log")
        stack.wait_until("nginx origin", lambda: stack.http_get(f"{self.url}/", timeout=1)[0] > 0,
                         timeout=15, proc=self.proc.p, log=run / "error.log")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.proc.stop()
