"""The web server `make run` starts: gunicorn with a fixed pool of threads.

Django keeps one database connection per thread for `CONN_MAX_AGE`
seconds. Under `runserver`, every request gets a thread of its own, so
every request left a connection open behind it: about 1,800 ordinary
requests took all of PostgreSQL's 100 and the next ones failed. Here the
threads are a pool (`WEB_WORKERS` processes × `WEB_THREADS` threads), so
the server never holds more connections than that, whatever the traffic.
A production host may use this file too (`-c python:leadops.gunicorn_conf`)
or its own (docs/deploy/leadops-web.service).
"""

import os

bind = os.environ.get("WEB_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_WORKERS", "2"))
threads = int(os.environ.get("WEB_THREADS", "4"))
worker_class = "gthread"
# A request that takes longer is a bug to see, not a worker to lose silently.
timeout = 60
graceful_timeout = 10
accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
