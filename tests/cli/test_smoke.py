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


def test_number_formats_never_use_exponents_or_negative_zero() -> None:
    from shardplan.units import format_bytes, format_count, format_ms, format_seconds, plural

    assert format_seconds(1.01) == "1.01 s" and format_seconds(0.99996) == "1 s"  # not "1000 ms"
    assert format_seconds(12345.6) == "12,346 s" and format_seconds(0.0412) == "41.2 ms"
    assert format_ms(1.0104) == "1,010" and format_ms(0.0123) == "12.3" and format_ms(2e-13) == "0"
    assert format_bytes(-0.000244) == "0 B" and format_bytes(3 * 2**30) == "3 GiB"
    # 999.5–1023.9 of a unit rounded to three digits is 1000: whole units, not "1e+03 GiB"
    assert format_bytes(999.7 * 2**30) == "1,000 GiB" and format_bytes(1023.9 * 2**30) == "1,024 GiB"
    assert format_bytes(1536 * 2**40) == "1,536 TiB" and format_bytes(998.4 * 2**20) == "998 MiB"
    assert format_count(1e16) == "10,000T" and format_count(70.55e9) == "70.55B"
    assert plural(1, "sequence") == "1 sequence" and plural(256, "sequence") == "256 sequences"
