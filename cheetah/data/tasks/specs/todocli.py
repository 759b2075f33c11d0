"""Tasks on benchmarks/repos/todocli (a command-line todo list)."""

from build import Bug, Change, WriteTests

R = "todocli"

RUN_OLD = """def run(argv: list[str], out=None) -> int:
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
"""

RUN_NEW = """def cmd_add(store: Store, args: argparse.Namespace, out) -> bool:
    item = store.add(args.title, args.priority, args.tag)
    print(f"added {item.id}", file=out)
    return True


def cmd_list(store: Store, args: argparse.Namespace, out) -> bool:
    items = store.items if args.all else store.pending(args.tag)
    if args.all and args.tag:
        items = [i for i in items if args.tag in i.tags]
    print(render_list(items), file=out)
    print(summary(store.items), file=out)
    return False


def cmd_done(store: Store, args: argparse.Namespace, out) -> bool:
    print(render_item(store.complete(args.id)), file=out)
    return True


def cmd_remove(store: Store, args: argparse.Namespace, out) -> bool:
    item = store.remove(args.id)
    print(f"removed {item.id}", file=out)
    return True


# command -> handler; a handler returns whether the store changed and must be saved
COMMANDS = {"add": cmd_add, "list": cmd_list, "done": cmd_done, "remove": cmd_remove}


def run(argv: list[str], out=None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    store = Store.load(args.file)
    try:
        changed = COMMANDS[args.command](store, args, out)
    except TodoError as e:
        print(f"todo: {e}", file=sys.stderr)
        return 1
    if changed:
        store.save(args.file)
    return 0
"""

TASKS = [
    Bug(
        id="todocli-done-mark",
        repo=R,
        tier="easy",
        query="render_item in todocli/render.py marks open items with [x] and done items "
        "with [ ]. It should be the other way round. Fix it.",
        file="todocli/render.py",
        good='mark = "x" if item.done else " "',
        bad='mark = " " if item.done else "x"',
    ),
    Bug(
        id="todocli-summary-order",
        repo=R,
        tier="easy",
        split="heldout",
        query="summary in todocli/render.py prints the numbers in the wrong order. It should "
        "print 'DONE/TOTAL done', like '1/3 done'. Fix it.",
        file="todocli/render.py",
        good='return f"{done}/{len(items)} done"',
        bad='return f"{len(items)}/{done} done"',
    ),
    Bug(
        id="todocli-truncate-width",
        repo=R,
        tier="easy",
        query="truncate in todocli/render.py returns strings longer than the width. The "
        "result, '...' included, must be exactly `width` characters. Fix it.",
        file="todocli/render.py",
        good='return text[: width - 3] + "..."',
        bad='return text[:width] + "..."',
    ),
    Bug(
        id="todocli-priority-one",
        repo=R,
        tier="easy",
        split="heldout",
        query="Store.add in todocli/store.py rejects priority 1, but priorities 1 to 5 "
        "(inclusive) are valid. Fix the check.",
        file="todocli/store.py",
        good="if not MIN_PRIORITY <= priority <= MAX_PRIORITY:",
        bad="if not MIN_PRIORITY < priority <= MAX_PRIORITY:",
    ),
    Bug(
        id="todocli-next-id",
        repo=R,
        tier="easy",
        query="Store.next_id in todocli/store.py returns an id that is already in use. It "
        "must return one more than the largest id (1 for an empty list). Fix it.",
        file="todocli/store.py",
        good="return max((item.id for item in self.items), default=0) + 1",
        bad="return max((item.id for item in self.items), default=1)",
    ),
    Bug(
        id="todocli-pending-order",
        repo=R,
        query="`todo list` shows low-priority items first. Priority 1 is the highest and "
        "should be listed first (ties by id).",
        file="todocli/store.py",
        good="key=lambda i: (i.priority, i.id)",
        bad="key=lambda i: (-i.priority, i.id)",
    ),
    Bug(
        id="todocli-duplicate-tags",
        repo=R,
        split="heldout",
        query="Adding an item with the same tag twice (`todo add x --tag work --tag work`) "
        "stores the tag twice; tags should be unique and sorted.",
        file="todocli/store.py",
        good="tags=sorted(set(tags or []))",
        bad="tags=list(tags or [])",
    ),
    Change(
        id="todocli-edit-command",
        repo=R,
        kind="feature",
        query="Add an `edit` command: `todo edit ID [--title T] [--priority P]` changes the "
        "title and/or priority of an item (same validation as `add`) and prints the item "
        "as `done` does. Back it with Store.edit(item_id, title=None, priority=None) -> Item "
        "that raises TodoError for an unknown id, an empty title or a bad priority.",
        edits=[
            (
                "todocli/store.py",
                "    def complete(self, item_id: int) -> Item:",
                "    def edit(\n"
                "        self, item_id: int, title: str | None = None, priority: int | None = None\n"
                "    ) -> Item:\n"
                "        item = self.get(item_id)\n"
                "        if title is not None:\n"
                "            if not title.strip():\n"
                '                raise TodoError("title is empty")\n'
                "            item.title = title.strip()\n"
                "        if priority is not None:\n"
                "            if not MIN_PRIORITY <= priority <= MAX_PRIORITY:\n"
                "                raise TodoError(\n"
                '                    f"priority must be {MIN_PRIORITY}..{MAX_PRIORITY}, got {priority}"\n'
                "                )\n"
                "            item.priority = priority\n"
                "        return item\n\n"
                "    def complete(self, item_id: int) -> Item:",
            ),
            (
                "todocli/cli.py",
                '    remove = sub.add_parser("remove", help="delete an item")',
                '    edit = sub.add_parser("edit", help="change an item")\n'
                '    edit.add_argument("id", type=int)\n'
                '    edit.add_argument("--title")\n'
                '    edit.add_argument("--priority", "-p", type=int)\n'
                '    remove = sub.add_parser("remove", help="delete an item")',
            ),
            (
                "todocli/cli.py",
                '        elif args.command == "remove":',
                '        elif args.command == "edit":\n'
                "            print(render_item(store.edit(args.id, args.title, args.priority)), file=out)\n"
                '        elif args.command == "remove":',
            ),
        ],
        hidden={
            "tests/test_edit.py": "import io\n\nimport pytest\n\n"
            "from todocli.cli import run\nfrom todocli.store import Store, TodoError\n\n\n"
            "def test_store_edit():\n"
            "    s = Store()\n"
            '    s.add("old", 3)\n'
            '    item = s.edit(1, title=" new ", priority=1)\n'
            '    assert (item.title, item.priority) == ("new", 1)\n'
            '    assert s.edit(1).title == "new"\n\n\n'
            "def test_store_edit_errors():\n"
            "    s = Store()\n"
            '    s.add("a")\n'
            '    for kwargs in ({"priority": 9}, {"title": "  "}):\n'
            "        with pytest.raises(TodoError):\n"
            "            s.edit(1, **kwargs)\n"
            "    with pytest.raises(TodoError):\n"
            '        s.edit(2, title="x")\n\n\n'
            "def test_cli_edit(tmp_path):\n"
            '    f = str(tmp_path / "t.json")\n'
            '    run(["--file", f, "add", "draft"], out=io.StringIO())\n'
            "    out = io.StringIO()\n"
            '    assert run(["--file", f, "edit", "1", "--title", "final", "-p", "2"], out=out) == 0\n'
            '    assert "final" in out.getvalue() and "P2" in out.getvalue()\n'
            '    assert Store.load(tmp_path / "t.json").items[0].title == "final"\n'
        },
    ),
    Change(
        id="todocli-clear-command",
        repo=R,
        kind="feature",
        query="Add a `clear` command to todocli: `todo clear` deletes every done item and "
        "prints 'cleared N item(s)'. Implement it as Store.clear_done() -> int (the number "
        "removed) and wire it into the CLI.",
        edits=[
            (
                "todocli/store.py",
                "    def pending(self, tag: str | None = None) -> list[Item]:",
                "    def clear_done(self) -> int:\n"
                '        """Delete done items; return how many."""\n'
                "        before = len(self.items)\n"
                "        self.items = [i for i in self.items if not i.done]\n"
                "        return before - len(self.items)\n\n"
                "    def pending(self, tag: str | None = None) -> list[Item]:",
            ),
            (
                "todocli/cli.py",
                '    remove = sub.add_parser("remove", help="delete an item")',
                '    sub.add_parser("clear", help="delete all done items")\n'
                '    remove = sub.add_parser("remove", help="delete an item")',
            ),
            (
                "todocli/cli.py",
                '        elif args.command == "remove":',
                '        elif args.command == "clear":\n'
                '            print(f"cleared {store.clear_done()} item(s)", file=out)\n'
                '        elif args.command == "remove":',
            ),
        ],
        hidden={
            "tests/test_clear.py": "import io\n\n"
            "from todocli.cli import run\nfrom todocli.store import Store\n\n\n"
            "def test_clear_done():\n"
            "    s = Store()\n"
            '    for t in "abc":\n'
            "        s.add(t)\n"
            "    s.complete(1)\n"
            "    s.complete(3)\n"
            "    assert s.clear_done() == 2\n"
            '    assert [i.title for i in s.items] == ["b"]\n\n\n'
            "def test_cli_clear(tmp_path):\n"
            '    f = str(tmp_path / "t.json")\n'
            '    run(["--file", f, "add", "a"], out=io.StringIO())\n'
            '    run(["--file", f, "done", "1"], out=io.StringIO())\n'
            "    out = io.StringIO()\n"
            '    assert run(["--file", f, "clear"], out=out) == 0\n'
            '    assert out.getvalue() == "cleared 1 item(s)\\n"\n'
            '    assert Store.load(tmp_path / "t.json").items == []\n'
        },
    ),
    Change(
        id="todocli-command-table",
        repo=R,
        kind="refactor",
        query="Refactor todocli/cli.py: run() is one long if/elif chain. Split it into one "
        "function per command (cmd_add, cmd_list, cmd_done, cmd_remove), each taking "
        "(store, args, out) and returning whether the store changed and must be saved, "
        "dispatched through a dict COMMANDS mapping the command name to its function. "
        "Behaviour must not change and the tests must stay green.",
        edits=[("todocli/cli.py", RUN_OLD, RUN_NEW)],
        hidden={
            "tests/test_command_table.py": "import io\n\nfrom todocli import cli\n\n\n"
            "def test_commands_table():\n"
            '    assert set(cli.COMMANDS) == {"add", "list", "done", "remove"}\n'
            '    assert cli.COMMANDS["add"] is cli.cmd_add\n\n\n'
            "def test_list_does_not_write_the_file(tmp_path):\n"
            '    path = tmp_path / "t.json"\n'
            '    assert cli.run(["--file", str(path), "list"], out=io.StringIO()) == 0\n'
            "    assert not path.exists()\n"
        },
    ),
    WriteTests(
        id="todocli-tests-render-list",
        repo=R,
        query="render_list and summary in todocli/render.py have no tests. Write tests for "
        "both in a new file tests/test_render_list.py (empty list, several items, done "
        "counts).",
        test_file="tests/test_render_list.py",
        reference="from todocli.render import render_list, summary\n"
        "from todocli.store import Item\n\n\n"
        "def test_render_list_empty():\n"
        '    assert render_list([]) == "nothing to do"\n\n\n'
        "def test_render_list_one_line_per_item():\n"
        '    items = [Item(1, "a"), Item(2, "b", done=True)]\n'
        '    assert render_list(items).splitlines() == ["[ ]   1  P3  a", "[x]   2  P3  b"]\n\n\n'
        "def test_summary_counts_done():\n"
        '    items = [Item(1, "a"), Item(2, "b", done=True), Item(3, "c", done=True)]\n'
        '    assert summary(items) == "2/3 done"\n'
        '    assert summary([]) == "0/0 done"\n',
        mutants=[
            (
                "todocli/render.py",
                "done = sum(1 for i in items if i.done)",
                "done = sum(1 for i in items if not i.done)",
            ),
            ("todocli/render.py", 'return "nothing to do"', 'return ""'),
            (
                "todocli/render.py",
                'return "\\n".join(render_item(item) for item in items)',
                'return "\\n".join(render_item(item) for item in items[1:])',
            ),
        ],
    ),
]
