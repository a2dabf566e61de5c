"""``det-estimator ui``'s command line."""

import pytest

from det_estimator.cli import build_parser, main


def test_the_defaults_are_this_machine_only_on_port_8080():
    args = build_parser().parse_args(["ui"])
    assert (args.host, args.port, args.token, args.refresh) == ("127.0.0.1", 8080, None, 3.0)
    assert build_parser().parse_args(["ui", "--store", "s.sqlite"]).store == "s.sqlite"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ui", "--port", "0"], "must be a port, an integer from 1 to 65535"),
        (["ui", "--port", "http"], "must be a port"),
        (["ui", "--token", "short"], "must be at least 16 characters long"),
        (["ui", "--refresh", "-1"], "must be a number of seconds"),
    ],
)
def test_a_bad_option_is_a_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_serve_prints_the_address_with_a_new_token_only_off_loopback(monkeypatch, tmp_path, capsys):
    import uvicorn

    from det_estimator.ui import serve

    ran = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: ran.append(options))
    monkeypatch.delenv("DET_ESTIMATOR_UI_TOKEN", raising=False)
    serve(tmp_path / "store.sqlite", port=8123)
    assert "at http://127.0.0.1:8123/ (Ctrl-C" in capsys.readouterr().out
    serve(tmp_path / "store.sqlite", host="0.0.0.0", port=8123)
    printed = capsys.readouterr().out
    assert "http://0.0.0.0:8123/?token=" in printed and "every page needs the token" in printed
    serve(tmp_path / "store.sqlite", host="0.0.0.0", port=8123, token="given-token-0123456789")
    assert "given-token" not in capsys.readouterr().out  # a token given stays where it was given
    assert [options["host"] for options in ran] == ["127.0.0.1", "0.0.0.0", "0.0.0.0"]
    assert not (tmp_path / "store.sqlite").exists()
