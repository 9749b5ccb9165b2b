"""``serve --help`` names what a new operator would otherwise find by accident: the fleet page on
``--http-listen``, what ``--workers 1`` means, and the database each worker makes beside ``--db``."""

from __future__ import annotations

from click.testing import CliRunner

from nodeagent.collector.cli.serve import serve


def _help() -> str:
    done = CliRunner().invoke(serve, ["--help"], terminal_width=200)
    assert done.exit_code == 0, done.output
    return " ".join(done.output.split())


def test_http_listen_names_the_fleet_page() -> None:
    assert "HTTP address of the fleet page (/, /jobs, /alerts, /ledger), /metrics and /healthz" in _help()


def test_workers_says_what_one_worker_means_not_as_before() -> None:
    text = _help()
    assert "as before" not in text
    assert "(1: a single collector process, no front and no worker ports;" in text


def test_db_says_each_worker_makes_its_own_file_beside_it() -> None:
    assert "worker i makes its own beside it (--db x.db: x.worker1.db, x.worker2.db, ...)" in _help()


def test_worker_ports_take_agents_only() -> None:
    assert "agents only, queries go to --listen" in _help()
