"""``odf-chain completion SHELL``: the shell code that completes ``odf-chain`` and
``chain-verify`` (every subcommand and option, from the same parsers the commands use).

Completion is argcomplete's: the shell calls the command with ``_ARGCOMPLETE`` set, and
:func:`complete` answers from the parser before anything else is imported or run."""

from __future__ import annotations

import argparse
import os

from odf_chain.cli.common import EXIT_OK, examples

SHELLS = ("bash", "zsh", "fish")
PROGRAMS = ("odf-chain", "chain-verify")


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "completion",
        help="print the shell code that completes odf-chain and chain-verify",
        description="Print the code that makes SHELL complete the subcommands and options of "
        "odf-chain and chain-verify. Load it from your shell's start-up file.",
        epilog=examples(
            'eval "$(odf-chain completion bash)"      # in ~/.bashrc',
            'eval "$(odf-chain completion zsh)"       # in ~/.zshrc',
            "odf-chain completion fish | source      # in ~/.config/fish/config.fish",
        ),
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import argcomplete

    print(argcomplete.shellcode(list(PROGRAMS), shell=args.shell), end="")
    return EXIT_OK


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request and exit, when this process is one (the shell
    sets ``_ARGCOMPLETE``); otherwise return at once, importing nothing."""
    if "_ARGCOMPLETE" in os.environ:
        import argcomplete

        argcomplete.autocomplete(parser)
