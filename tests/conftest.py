"""Settings for the whole suite."""

import os

# Commands the tests start run in their own process, as the tests expect: no command daemon (nbprec.cli.daemon)
# is started or used, except by tests/test_cli_daemon.py, which gives its commands a daemon of their own.
os.environ["NBPREC_DAEMON"] = "off"
