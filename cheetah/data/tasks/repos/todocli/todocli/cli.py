"""``todo``: the command-line entry point."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from todocli.render import render_item, render_list, summary
from todocli.store import Store, TodoError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="todo", description="A todo list in a JSON file.")
    parser.add_argument("--file", type=Path, default=Path("todo.json"), help="the list file")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="add an item")
    add.add_argument("title")
    add.add_argument("--priority", "-p", type=int, default=3, help="1 (high) to 5 (low)")
    add.add_argument("--tag", "-t", action="append", default=[], help="a tag (repeatable)")
    lst = sub.add_parser("list", help="show items")
    lst.add_argument("--all", action="store_true", help="include done items")
    lst.add_argument("--tag", help="only items with this tag")
    done = sub.add_parser("done", help="mark an item done")
    done.add_argument("id", type=int)
    remove = sub.add_parser("remove", help="delete an item")
    remove.add_argument("id", type=int)
    return parser


def run(argv: list[str], out=None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    store = Store.load(args.file)
    try:
        if args.command == "add":
            item = store.add(args.title, args.priority, args.tag)
            print(f"added {item.id}", file=out)
        elif args.command == "list":
            items = store.items if args.all else store.pending(args.tag)
            if args.all and args.tag:
                items = [i for i in items if args.tag in i.tags]
            print(render_list(items), file=out)
            print(summary(store.items), file=out)
            return 0
        elif args.command == "done":
            print(render_item(store.complete(args.id)), file=out)
        elif args.command == "remove":
            item = store.remove(args.id)
            print(f"removed {item.id}", file=out)
    except TodoError as e:
        print(f"todo: {e}", file=sys.stderr)
        return 1
    store.save(args.file)
    return 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))
