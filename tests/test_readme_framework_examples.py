"""README's LangChain and LlamaIndex examples, run as written against a real database.

The blocks are found by a marker, not by line numbers: the ```python blocks of the section whose
heading names LangChain, the one importing harness.frameworks.langchain and the one importing
harness.frameworks.llamaindex. Each runs in a fresh interpreter, from a directory outside the
repository, with PGKB_DSN (the variable the examples read) pointing at a test database that holds the
sample corpus (examples/corpus), and with every connection to anything but the database refused, so
a tokenizer or NLTK download would fail the test. Where `unshare` can take the network away
altogether, they run once more that way, over the server's Unix socket."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_ollama import FakeOllama

from harness import loader

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
FRAMEWORK_MODULES = ("pgkb.langchain", "pgkb.llamaindex")

# Runs the code in argv[1] as a script; any network access but to the database's host fails.
RUNNER = r"""
import sys

LOCAL = {"127.0.0.1", "::1", "localhost", None}


def refuse(where):
    print(f"NETWORK ACCESS: {where}", file=sys.stderr)
    raise OSError(f"network access refused in this test: {where}")


def audit(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple) and args[1][0] not in LOCAL:
        refuse(args[1])
    elif event == "socket.getaddrinfo" and args[0] not in LOCAL:
        refuse(args[0])
    elif event == "urllib.Request":
        refuse(args[0])


sys.addaudithook(audit)
exec(compile(sys.argv[1], "README.md", "exec"), {"__name__": "__main__"})
"""


def framework_examples(text: str) -> dict[str, str]:
    """The python blocks of the section whose heading names LangChain, keyed by the framework module
    each imports."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#") and "LangChain" in line)
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].startswith("#") and len(lines[i]) - len(lines[i].lstrip("#")) <= level
        ),
        len(lines),
    )
    section = "\n".join(lines[start:end])
    blocks = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    found = {}
    for module in FRAMEWORK_MODULES:
        matching = [b for b in blocks if f"from {module} import" in b]
        assert len(matching) == 1, f"README: one python block importing {module} under the LangChain heading"
        found[module] = matching[0]
    return found


@pytest.fixture(scope="module")
def sample_corpus(module_db, pg_server):
    dsn = f"postgresql://{pg_server.user}@{pg_server.host}:{pg_server.port}/{module_db.info.dbname}"
    summary = loader.ingest(dsn, [str(REPO / "examples" / "corpus")], progress=False)
    assert summary.failed == [] and summary.synced
    return dsn


def run_example(
    code: str, dsn: str, tmp_path: Path, wrapper: list[str] = (), environment: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PGKB_DSN": dsn,
        # the harness as this checkout has it (the project's venv has it installed, editable)
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path),
        **(environment or {}),
    }
    return subprocess.run(
        [*wrapper, sys.executable, "-c", RUNNER, code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def citations(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if "policies/refund-policy-v" in line and " § " in line]


@pytest.mark.parametrize("module", FRAMEWORK_MODULES)
def test_readme_framework_example_runs_as_written_and_returns_passages(module, sample_corpus, tmp_path):
    code = framework_examples(README.read_text(encoding="utf-8"))[module]
    proc = run_example(code, sample_corpus, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "NETWORK ACCESS" not in proc.stderr
    printed = citations(proc.stdout)
    assert printed, proc.stdout
    assert "policies/refund-policy-v2.md" in printed[0]  # the version current now ranks first
    assert "Decision(answerability='" in proc.stdout and "no evidence" not in proc.stdout


@pytest.mark.parametrize("module", FRAMEWORK_MODULES)
def test_readme_framework_example_runs_with_the_network_unavailable(module, sample_corpus, module_db, tmp_path):
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"]).returncode != 0:
        pytest.skip("unshare -n is not available here")
    socket_dir = module_db.execute("SHOW unix_socket_directories").fetchone()["unix_socket_directories"]
    socket_dir = socket_dir.split(",")[0].strip()
    if not socket_dir or socket_dir.startswith("@"):
        pytest.skip("the test cluster has no Unix socket directory")
    port = module_db.execute("SHOW port").fetchone()["port"]
    dsn = f"postgresql://postgres@/{module_db.info.dbname}?host={socket_dir}&port={port}"
    code = framework_examples(README.read_text(encoding="utf-8"))[module]
    proc = run_example(code, dsn, tmp_path, wrapper=["unshare", "-n"])
    assert proc.returncode == 0, proc.stderr
    assert "NETWORK ACCESS" not in proc.stderr
    assert citations(proc.stdout), proc.stdout


def answer_example(text: str) -> str:
    """The python block under README's heading "From retrieval to a cited answer"."""
    section = text.split("From retrieval to a cited answer", 1)[1].split("\n#", 1)[0]
    [block] = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    return block


def test_readme_answer_example_sends_cited_passages_to_the_chat_model_and_abstains_on_no_evidence(
    sample_corpus, tmp_path
):
    code = answer_example(README.read_text(encoding="utf-8"))
    # the same function asked an off-topic question too: no evidence, so the model is never called
    code += '\nprint(answer("Quel est le record du monde du saut à la perche sur Mars?"))\n'
    with FakeOllama() as chat:
        proc = run_example(code, sample_corpus, tmp_path, environment={"OLLAMA_HOST": chat.url})
        chats = list(chat.chats)
    assert proc.returncode == 0, proc.stderr
    assert "NETWORK ACCESS" not in proc.stderr
    first, _, rest = proc.stdout.partition("\n")
    assert first.endswith("[1]") or "[1] (low confidence" in first, proc.stdout  # the model's cited answer
    assert citations(proc.stdout) and citations(proc.stdout)[0].startswith("[1] policies/refund-policy-v2.md")
    assert len(chats) == 1, "only the answerable question reaches the model"
    user = chats[0][-1]["content"]
    assert user.startswith("Question: 退款期限是几天？") and "[1] " in user
    assert proc.stdout.rstrip().endswith("The knowledge base has nothing on this; not answering.")
