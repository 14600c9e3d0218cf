"""The CLI starts, prints its version, and turns unknown commands into exit code 2."""

from shardplan import __version__


def test_version(run_cli):
    r = run_cli("--version")
    assert r.code == 0
    assert r.out.strip() == f"shardplan {__version__}"


def test_unknown_command_is_bad_input(run_cli):
    r = run_cli("frobnicate")
    assert r.code == 2
    assert r.err.count("\n") == 1 and "frobnicate" in r.err
