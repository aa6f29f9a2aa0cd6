"""Settings for the whole suite."""

import os

import binder_support

# Commands the tests start run in their own process, as the tests expect: no command daemon (nbprec.cli.daemon)
# is started or used, except by tests/test_cli_daemon.py, which gives its commands a daemon of their own.
os.environ["NBPREC_DAEMON"] = "off"


def pytest_collection_finish(session):
    """The Binder build, a few minutes of pip on one core, starts now and runs beside the other tests."""
    if any(item.nodeid == binder_support.TEST_ID for item in session.items):
        binder_support.build()


def pytest_sessionfinish(session, exitstatus):
    binder_support.finish()
