"""The secret scanner: what people paste is found, replaced in place when captured,
refused when written, reported by check and never sent by sync; ordinary prose and code
are left alone (spec/memory-layers.md, "Secrets")."""

from __future__ import annotations

import base64
import functools
import json
import re
import string
import time
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, snapshot
from helpers import assert_clean_refusal, fake_token, findings, handoff_json

import stm

B64 = string.ascii_letters + string.digits + "+/"
URLSAFE = string.ascii_letters + string.digits + "-_"
HEX = "0123456789abcdef"

# What people paste, one line each: (id, the line, the secret's core). The core must be
# gone after redaction; the rest of the line stays readable.
PASTED = [
    ("export-password", "export PASSWORD={}", fake_token("Pw", 14)),
    ("pgpassword", "PGPASSWORD={} psql -h db -U app", fake_token("pg", 14)),
    ("yaml-password", "password: {}", fake_token("h", 10) + "7"),
    ("mysql-p", "mysql -u root -p{} shop", fake_token("My", 12)),
    ("curl-u", "curl -u alice:{} https://api.example.com/v1", fake_token("c", 14)),
    ("docker-login", "docker login -u me -p {} registry.example.com", fake_token("dk", 16)),
    ("docker-pat", "docker login -u me -p {}", fake_token("dckr_pat_", 27, URLSAFE)),
    ("bearer", "curl -H 'Authorization: Bearer {}' https://x", fake_token("ab1", 30)),
    ("basic", "Authorization: Basic {}", fake_token("dXNl", 20, B64)),
    ("auth-token", "authorization: token {}", fake_token("t0", 24)),
    ("redis-empty-user", "redis://:{}@cache.internal:6379/0", fake_token("r3", 12)),
    ("upper-scheme", "HTTPS://deploy:{}@git.example.com/x.git", fake_token("u", 14)),
    ("slash-password", "ftp://bob:{}@files.example.com/in", "ab/" + fake_token("c", 10)),
    ("percent-at", "postgres://app:{}@db:5432/shop", "pa%40" + fake_token("s", 10)),
    (
        "sts-json",
        '{{"AccessKeyId": "ASIA{}", "SecretAccessKey": "{}"}}',
        None,  # two secrets: see below
    ),
    ("session-token", "AWS_SESSION_TOKEN={}", fake_token("FwoG", 60, B64)),
    ("slack-xapp", "SLACK={}", "xapp-1-" + fake_token("A0", 30, URLSAFE)),
    ("api-key", "api_key={}&format=json", fake_token("k", 20)),
    ("token-eq", "token={}", fake_token("t", 20)),
    ("client-secret", "client_secret: {}", fake_token("cS", 18) + "9"),
    (
        "azure",
        "DefaultEndpointsProtocol=https;AccountName=shop;AccountKey={};EndpointSuffix=x",
        fake_token("", 40, B64) + "==",
    ),
    ("npmrc", "//registry.npmjs.org/:_authToken={}", fake_token("npm_", 36)),
    ("sendgrid", "key {}", fake_token("SG.", 22, URLSAFE) + fake_token(".", 43, URLSAFE)),
    ("google-oauth", "oauth {}", fake_token("ya29.", 60, URLSAFE)),
    (
        "discord",
        "post to {}",
        "https://discord.com/api/webhooks/123456789012/" + fake_token("", 60, URLSAFE),
    ),
    ("glued-github", "mytoken{}", fake_token("ghp_", 36)),
    ("glued-aws", "KEYID{}", fake_token("AKIA", 16, string.ascii_uppercase + string.digits)),
    ("password-flag", "app --password={} --verbose", fake_token("Fl", 14)),
    ("sshpass", "sshpass -p {} ssh deploy@host", fake_token("Ss", 12)),
    ("quoted-json", '{{"password": "{}"}}', fake_token("q", 12)),
    ("private-key-escaped", '"key": "-----BEGIN RSA PRIVATE KEY-----\\n{}\\n-----END', None),
]
STS_KEY = fake_token("", 16, string.ascii_uppercase + string.digits)
STS_SECRET = fake_token("", 40, B64)
KEY_BODY = fake_token("MIIE", 64, B64)


def pasted_cases():
    for case_id, template, core in PASTED:
        if case_id == "sts-json":
            yield case_id, template.format(STS_KEY, STS_SECRET), [STS_KEY, STS_SECRET]
        elif case_id == "private-key-escaped":
            yield case_id, template.format(KEY_BODY), [KEY_BODY]
        else:
            yield case_id, template.format(core), [core]


CASES = list(pasted_cases())


@pytest.mark.parametrize("line,cores", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_pasted_credential_is_found_and_redacted_in_place(line, cores):
    assert list(stm.find_secrets(line)), line
    redacted = stm.redact(f"before {line} after")
    for core in cores:
        assert core not in redacted
    assert redacted.startswith("before ") and redacted.endswith(" after") or "BEGIN" in line
    assert "[redacted: " in redacted
    # the words around the secret stay: a failing command stays useful
    first = line.split()[0].split("{")[0].split('"')[0]
    if first and first not in cores and not any(first in core for core in cores):
        assert first[:4] in redacted, (first, redacted)
    # redaction is stable: the result holds nothing more to redact
    assert stm.redact(redacted) == redacted
    assert not list(stm.find_secrets(redacted))


@pytest.mark.parametrize("line,cores", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_pasted_credential_is_refused_by_log_and_reported_by_check(store, call, line, cores):
    before = snapshot(store)
    result = call("log", f"deploy: {line}")
    assert result.code == 1 and "Traceback" not in result.err, result
    assert "refused" in result.err and all(core not in result.err for core in cores)
    assert snapshot(store) == before
    (store / ".stacks" / "refs" / "ops.md").write_text(f"# Ops\n\nline one\n{line}\n")
    report = call("check", "--json")
    found = [f for f in findings(report) if f["rule"] == "secret"]
    assert found and found[0]["path"] == ".stacks/refs/ops.md" and found[0]["line"] == 4
    assert found[0]["severity"] == "error" and report.code == 1
    assert all(core not in report.out for core in cores)


def test_a_token_split_by_zero_width_characters_or_written_in_lookalikes_is_found():
    token = fake_token("ghp_", 36)
    for shown in (
        token[:3] + "\u200b" + token[3:],
        "\u2060".join(token),
        "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in token),
    ):
        line = f"use {shown} now"
        assert [k for k, _, _ in stm.find_secrets(line)] == ["GitHub token"], shown
        redacted = stm.redact(line)
        assert redacted == "use [redacted: GitHub token] now", redacted
    # text around a look-alike keeps its place: the line number is the original's
    text = "one\ntwo é\n" + "ＡＫＩＡ" + "ABCDEFGHIJKLMNOP" + "\nfour"
    assert [(k, n) for k, n, _ in stm.find_secrets(text)] == [("AWS access key id", 3)]


# Ordinary notes and code a memory holds, none of which is a secret. Written for this test;
# each line is a kind of text the credential pattern and its neighbours could mistake.
ORDINARY = """\
The parser lives in src/parser.py; run `pytest -q` before pushing.
Set PASSWORD_FILE=/run/secrets/db_password in the compose file, never the password itself.
token = get_token()
password = os.environ["DB_PASSWORD"]
password = auth[2]
api_key = settings.api_key
if token == 0x0F:
secret_name: prod-db-credentials
max_tokens: 4096
token_count = len(tokens)
The author: Alice, with help from the team.
see the token: it expires after an hour
sorted(items, key=len)
git push -u origin main:main
docker run -u 1000:1000 app:latest
postgres://localhost:5432/db
https://registry.npmjs.org:443/@scope/pkg
mysql -P3306 -p shop
ssh login -p 22 host
password: ${DB_PASSWORD}
AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY}
export GITHUB_TOKEN="$(gh auth token)"
task-management-for-the-whole-team
Bearer authentication is what the API uses.
token_url=https://auth.example.com/token
the password is in the vault, ask Sam
Keyboard: qwerty layout, US
PWD=/home/me/project
cd "$OLDPWD"
passthrough: true
bypass: the cache when testing
key: value pairs are read in order
monkey=patched in conftest
The secret: nobody knows why the flaky test passes on Fridays.
credentials: see docs/deploy.md
client_secret: <from the console>
password: ********
token: xxxxxxxx
password=changeme in the example file only
Use --password-stdin with docker login.
curl -u "$USER:$PASS" https://x
passphrase: ask the on-call engineer
secretsmanager.get_secret_value(SecretId=name)
The key insight: caches must be invalidated on write.
Keys: ~/.ssh/id_ed25519.pub is the public one.
auth: required
Authorization: Bearer $TOKEN
Authorization: Bearer ${TOKEN}
https://user@example.com/path
mailto:user@example.com
git clone git@github.com:org/repo.git
The bearer of bad news was the CI.
-----BEGIN CERTIFICATE-----
-----BEGIN PUBLIC KEY-----
ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGz me@host
sk-learn is a common misspelling of scikit-learn
disk-usage-report-generator-for-ops
npm_config_cache=/tmp/npm
hf_hub_download(repo_id, filename)
pypi-project-name
eyJhbGciOiJIUzI1NiJ9 is only a JWT header
"""


def test_ordinary_prose_and_code_are_not_secrets():
    assert list(stm.find_secrets(ORDINARY)) == []
    assert stm.redact(ORDINARY) == ORDINARY


def test_the_scanner_stays_linear_on_hostile_text():
    """Inputs made to make a regex back off: a megabyte of each. A linear scan takes well
    under a second each; a quadratic one would take hours, so the bound is generous."""
    hostile = [
        "key" * 350_000,
        "password" + "=" * 1_000_000,
        "https://" + "a:" * 500_000,
        "mysql " + "x" * 1_000_000,
        "-u " + "a" * 1_000_000 + ":",
        "sk-" * 350_000,
        "token: " + '"' + "\\\\" * 500_000,
        "auth: basic " * 90_000,
        "é\u200b" * 400_000 + "ghp_",
    ]
    for text in hostile:
        started = time.monotonic()
        list(stm.find_secrets(text))
        stm.redact(text)
        assert time.monotonic() - started < 30, text[:20]


def test_a_line_marked_stm_allow_secret_is_not_reported_and_capture_ignores_the_mark(store, call):
    token = fake_token("ghp_", 36)
    ref = store / ".stacks" / "refs" / "ops.md"
    ref.write_text(f"# Ops\n\nExample: {token} (stm:allow-secret)\n")
    assert not [f for f in findings(call("check", "--json")) if f["rule"] == "secret"]
    # a transcript's text is redacted all the same: nobody reviewed it
    assert token not in stm.redact(f"{token} stm:allow-secret")


@pytest.mark.parametrize(
    "argv",
    [
        ("log", "--allow-secret", "the fixture token is {}"),
        ("note", "Observations", "the fixture token is {}", "--allow-secret"),
        ("fact", "set", "fixture", "the fixture token is {}", "--allow-secret"),
    ],
    ids=["log", "note", "fact"],
)
def test_allow_secret_writes_the_mark_so_check_stays_clean(store, call, argv):
    token = fake_token("ghp_", 36)
    result = call(*[a.format(token) for a in argv])
    assert result.code == 0, result
    text = "".join(
        p.read_text() for p in (store / ".stacks").rglob("*.md") if token in p.read_text()
    )
    assert f"{token} (stm:allow-secret)" in text
    assert not [f for f in findings(call("check", "--json")) if f["rule"] == "secret"]


def test_check_reports_a_secret_in_state_and_history(store, call):
    call("session", "new", "--name", "deploy")
    [folder] = [p for p in (store / ".state" / "sessions").iterdir() if p.is_dir()]
    token = fake_token("glpat-", 20, URLSAFE)
    state = json.loads((folder / "state.json").read_text())
    state["resume_instruction"] = f"rerun with GITLAB_TOKEN={token}"
    (folder / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    with (folder / "history.jsonl").open("a") as f:
        f.write(json.dumps({"timestamp": "2026-01-01T00:00:00Z", "event": f"x {token}"}) + "\n")
    report = call("check", "--json")
    found = {f["path"] for f in findings(report) if f["rule"] == "secret"}
    rel = folder.relative_to(store).as_posix()
    assert {f"{rel}/state.json", f"{rel}/history.jsonl"} <= found
    assert token not in report.out


# The findings of a `check --json` Result, which must hold no traceback.
findings = functools.partial(findings, no_traceback=True)


JWT = (
    base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode()
    + "."
    + base64.urlsafe_b64encode(b'{"sub":"1234567890","name":"Test"}').rstrip(b"=").decode()
    + "."
    + fake_token("", 43, string.ascii_letters + string.digits + "-_")
)


# B64 in another order: the tokens of SECRETS were drawn from this one (fake_token).
B64_SLASH_FIRST = string.ascii_letters + string.digits + "/+"


# (kind, looks like a secret, a near miss that does not)
SECRETS = [
    ("pgp-private-key", "-----BEGIN PGP PRIVATE KEY BLOCK-----",
     "-----BEGIN PGP PUBLIC KEY BLOCK-----"),
    ("openssh-private-key", "-----BEGIN OPENSSH PRIVATE KEY-----",
     "ssh-ed25519 " + fake_token("AAAAC3NzaC1lZDI1NTE5AAAAI", 43, B64_SLASH_FIRST) + " me@host"),
    ("pkcs8-private-key", "-----BEGIN ENCRYPTED PRIVATE KEY-----",
     "-----BEGIN CERTIFICATE-----"),
    ("aws-secret-key", "aws_secret_access_key = " + fake_token("", 40, B64_SLASH_FIRST),
     "aws_secret_access_key = ${AWS_SECRET_ACCESS_KEY}"),
    ("github-token-glued", "tokenghp_" + fake_token("", 36), "tokenghp_" + fake_token("", 12)),
    ("gitlab-token", fake_token("glpat-", 20, URLSAFE), "glpat-short"),
    ("google-api-key", fake_token("AIza", 35, URLSAFE), "AIzaShort"),
    ("stripe-live-key", fake_token("sk_live_", 24), "sk_live_" + fake_token("", 5)),
    ("stripe-restricted-key", fake_token("rk_live_", 24), "rk_live_" + fake_token("", 5)),
    ("npm-token", fake_token("npm_", 36), "npm_config_cache"),
    ("pypi-token", "pypi-AgEIcHlwaS5vcmc" + fake_token("", 60, URLSAFE), "pypi-project-name"),
    ("huggingface-token", fake_token("hf_", 34, string.ascii_letters), "hf_hub_download"),
    ("slack-webhook",
     "https://hooks.slack.com/services/" + fake_token("T", 8, string.ascii_uppercase)
     + "/" + fake_token("B", 8, string.ascii_uppercase) + "/" + fake_token("", 24),
     "see https://hooks.slack.com/services/ for the setup"),
    ("jwt", JWT, "eyJhbGciOiJIUzI1NiJ9 is only a header"),
    ("url-with-password", "https://deploy:" + fake_token("", 14) + "@git.example.com/x.git",
     "https://deploy@git.example.com/x.git and postgres://localhost:5432/db"),
]  # fmt: skip


@pytest.mark.parametrize("kind,secret,near_miss", SECRETS, ids=[row[0] for row in SECRETS])
def test_secret_formats_are_refused_by_log_and_reported_by_check(
    store, call, kind, secret, near_miss
):
    before = snapshot(store)
    result = call("log", f"deploy note: {secret}")
    assert_clean_refusal(result, 1)
    assert snapshot(store) == before
    ref = store / ".stacks" / "refs" / "creds.md"
    ref.write_text(f"# Creds\n\nThe key: {secret}\n")
    found = findings(call("check", "--json"))
    assert any(f["rule"] == "secret" and f["path"] == ".stacks/refs/creds.md" for f in found)
    assert secret not in call("check").out  # never printed whole
    # the near miss is ordinary text
    result = call("log", f"deploy note: {near_miss}")
    assert result.code == 0, result
    ref.write_text(f"# Creds\n\nThe key: {near_miss}\n")
    assert not [f for f in findings(call("check", "--json")) if f["rule"] == "secret"]


def documented_secret_patterns() -> list[str]:
    text = (ROOT / "spec" / "memory-layers.md").read_text()
    section = text.split("### Secrets", 1)[1].split("\n#", 1)[0]
    patterns = []
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)]
        if len(cells) >= 3 and cells[2].startswith("`") and cells[2].endswith("`"):
            patterns.append(cells[2].strip("`").replace("\\|", "|"))
    return patterns


def test_the_secret_formats_are_documented():
    """spec/memory-layers.md's table lists a pattern for every format, and none of the
    documented patterns flags a near miss."""
    patterns = [re.compile(p) for p in documented_secret_patterns()]
    assert patterns
    undocumented = [k for k, s, _ in SECRETS if not any(p.search(s) for p in patterns)]
    assert not undocumented, f"no documented pattern finds {undocumented}"
    flagged = [k for k, _, n in SECRETS if any(p.search(n) for p in patterns)]
    assert not flagged, f"documented patterns flag the near misses of {flagged}"


TOKEN = fake_token("ghp_", 36)


def secret_paths():
    return [
        ("handoff-notes", ["compose-handoff", "h.json"], {"notes": f"use {TOKEN}"}),
        ("handoff-task-id-in-receipt", ["compose-handoff", "h.json"], {"task_id": TOKEN}),
        ("handoff-other-field", ["compose-handoff", "h.json"], {"credentials": TOKEN}),
        ("note", ["note", "Status", f"use {TOKEN}"], None),
        ("checkpoint-note", ["session", "checkpoint", "--note", f"use {TOKEN}"], None),
        ("session-name", ["session", "new", "--name", f"use {TOKEN}"], None),
    ]


@pytest.mark.parametrize(
    "name,argv,handoff", secret_paths(), ids=[row[0] for row in secret_paths()]
)
def test_every_path_into_memory_refuses_a_secret(store, call, name, argv, handoff):
    call("session", "new")
    if handoff is not None:
        (store / "h.json").write_text(json.dumps(handoff_json(**handoff)))
    before = snapshot(store)
    result = call(*argv)
    assert_clean_refusal(result, 1)
    assert snapshot(store) == before


def memory_bytes(root: Path) -> bytes:
    data = b""
    for folder in (".stacks", ".state"):
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and not path.is_symlink():
                data += path.read_bytes()
    return data


def test_a_secret_in_stm_user_never_reaches_a_log_header(store, call, monkeypatch):
    monkeypatch.setenv("STM_USER", TOKEN)
    result = call("log", "hello")
    assert "Traceback" not in result.err
    assert TOKEN.encode() not in memory_bytes(store)
    if result.code == 0:
        assert call("check").code == 0


def test_import_refuses_an_archive_holding_a_secret(store, call):
    archive = store / "in.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(".stacks/refs/creds.md", f"# Creds\n\n{TOKEN}\n")
    before = snapshot(store)
    assert_clean_refusal(call("import", "in.zip"), 1)
    assert snapshot(store) == before


def test_secret_words_match_what_the_nested_pattern_matched():
    """SECRET_WORDS_RE was rewritten so that no run of letters splits two ways (the nested
    form backtracked exponentially on a near miss); it accepts exactly what the nested
    form accepted, on short strings where that form is quick."""
    import random

    part = r"(?:(?:[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+)+|[A-Z]+)"
    nested = re.compile(part + r"(?:[-_. ]+" + part + r")*")
    rng = random.Random(1076)
    for _ in range(20000):
        text = "".join(rng.choice("aAbBzZ_-. 1$") for _ in range(rng.randrange(1, 12)))
        assert bool(stm.SECRET_WORDS_RE.fullmatch(text)) == bool(nested.fullmatch(text)), text
