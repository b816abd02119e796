"""Every console script of setup.py (and each subcommand), and make demo's CLI, describes every option and
positional in its --help. The parsers are captured in-process: each script's main() runs until it
parses its arguments."""
import argparse
import importlib
import re
from pathlib import Path

import pytest

SETUP_PY = Path(__file__).resolve().parents[2] / "setup.py"
CONSOLE_SCRIPTS = re.findall(r'"([\w-]+)=([\w.]+):(\w+)"', SETUP_PY.read_text())
CLIS = [*CONSOLE_SCRIPTS, ("make-demo", "fairseq_normformer.cli.demo", "main")]


class Parsed(Exception):
    """Raised instead of parsing: carries the parser a console script built."""

    def __init__(self, parser):
        super().__init__(parser.prog)
        self.parser = parser


def parser_of(module: str, function: str, monkeypatch) -> argparse.ArgumentParser:
    def capture(parser, *args, **kwargs):
        raise Parsed(parser)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    main = getattr(importlib.import_module(module), function)
    with pytest.raises(Parsed) as parsed:
        main(["--help"]) if main.__code__.co_argcount else main()
    return parsed.value.parser


def undescribed(parser: argparse.ArgumentParser) -> list:
    """'PROG ARGUMENT' for each argument (and subcommand) of ``parser`` and its subcommands without a help."""
    missing = []
    for action in parser._actions:
        name = "/".join(action.option_strings) or action.dest
        if isinstance(action, argparse._SubParsersAction):
            described = {choice.dest for choice in action._choices_actions if (choice.help or "").strip()}
            missing += [f"{parser.prog} {command}" for command in action.choices if command not in described]
            for subparser in action.choices.values():
                missing += undescribed(subparser)
        elif action.help != argparse.SUPPRESS and not (action.help or "").strip():
            missing.append(f"{parser.prog} {name}")
    return missing


@pytest.mark.parametrize("script, module, function", CLIS, ids=[s for s, _, _ in CLIS])
def test_every_argument_has_a_help(script, module, function, monkeypatch):
    parser = parser_of(module, function, monkeypatch)
    assert parser.description, f"{script}: no description"
    assert undescribed(parser) == [], f"{script}: arguments without a help"


def test_the_check_finds_an_undescribed_argument():
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--described", help="yes")
    commands = parser.add_subparsers()
    commands.add_parser("sub", help="a subcommand").add_argument("path")
    commands.add_parser("bare").add_argument("--quiet", action="store_true", help=" ")
    assert undescribed(parser) == ["p bare", "p sub path", "p bare --quiet"]
