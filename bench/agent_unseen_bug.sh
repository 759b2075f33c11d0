#!/bin/bash
# A trained checkpoint in `cheetah agent` on a bug no task has (issue 28, third goal): the
# bundled sample repo with its own bug fixed and another planted (`if wpm <= 0:` turned into
# `if wpm > 0:` in textkit/stats.py), asked three ways: in the `locate` tier's words (the
# line is quoted, the file is not), as a bug report (the failing test and pytest's words, as
# the curriculum's `behaviour` tier writes them: cheetah.tasks.generate.write_query on this
# repo's own pytest run) and as a plain one-line report. It prints each run's turns (does
# the agent search before it edits?) and its last answer next to the diff it made (does it
# claim a change it did not make?), then the tests.
#   bench/agent_unseen_bug.sh /tmp/cheetah-demo/quickstart/checkpoints/step-3 [OUT_DIR]
# Not a timing: no baseline column. Needs `make install` (the project's .venv).
set -u
CKPT=${1:?usage: bench/agent_unseen_bug.sh CHECKPOINT [OUT_DIR]}
OUT=${2:-/tmp/cheetah-unseen-bug}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/.venv/bin
rm -rf "$OUT" && mkdir -p "$OUT"
plant() {  # the sample repo with its own bug fixed and the unseen one planted
  cp -r "$ROOT/cheetah/data/sample_repo" "$1"
  sed -i 's/return ranked\[: n - 1\]/return ranked[:n]/; s/if wpm <= 0:/if wpm > 0:/' \
    "$1/textkit/stats.py"
}
plant "$OUT/planted"
REPORT=$(cd "$OUT/planted" && "$BIN/python" - <<'PY'
import subprocess
from cheetah.tasks.generate import write_query
from cheetah.tasks.mutate import Mutant

run = subprocess.run(["python", "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider"],
                     capture_output=True, text=True)
failing = [l.split()[1] for l in run.stdout.splitlines() if l.startswith("FAILED ")]
source = open("textkit/stats.py").read()
line = next(i for i, l in enumerate(source.splitlines(), 1) if "if wpm > 0:" in l)
fixed = source.replace("if wpm > 0:", "if wpm <= 0:")
print(write_query(failing, run.stdout, Mutant("textkit/stats.py", "compare", line, fixed, source)))
PY
)
QUERIES=(
  'One operator is inverted in the line `if wpm > 0:` somewhere in this repository, so tests/test_stats.py::test_reading_time fails. Find that line and fix it; do not change the tests.'
  "$REPORT"
  'The test suite of this repo fails: find the bug and fix it. Do not change the tests.'
)
for i in 0 1 2; do
  repo=$OUT/repo$i before=$OUT/before$i
  plant "$before"
  cp -r "$before" "$repo"
  # Without --sandbox the agent edits $repo itself, so the diff and the tests below see it;
  # the repo is a throwaway copy.
  PATH=$BIN:$PATH "$BIN/cheetah" agent "${QUERIES[$i]}" --repo "$repo" --model "$CKPT" \
    --max-turns 6 --out "$OUT/trajectory$i.json" > "$OUT/agent$i.log" 2>&1
  echo "== query $i: ${QUERIES[$i]}"
  "$BIN/python" - "$OUT/trajectory$i.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
for turn in t["turns"]:
    calls = ", ".join(f"{c['name']}({c['args'].get('path') or c['args'].get('pattern') or ''})"
                      for c in turn["calls"]) or "no call"
    print(f"  turn {turn['index']}: {calls}")
print("  last answer:", (t["turns"][-1]["assistant"] if t["turns"] else "").strip()[-200:])
PY
  changes=$(diff -ru "$before" "$repo" | grep '^[-+][^-+]')
  echo "  its diff:"; echo "${changes:-(none)}" | sed 's/^/    /'
  (cd "$repo" && "$BIN/python" -m pytest -q -p no:cacheprovider 2>&1 | tail -n 1 | sed 's/^/  tests: /')
done
