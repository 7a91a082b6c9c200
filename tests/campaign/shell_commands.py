"""Command lines in shell text: the `attncheck fuzz` and `attncheck report merge` commands of the
campaign examples, found in their scripts, their flags checked (validate_examples.py uses them).
A check reports through the `checks` object it is given (validate_examples.Checks)."""

import os
import re
import shlex

# The flags the examples may give `attncheck fuzz` (True: the flag takes a value): the campaign's
# and the ones a campaign's command needs besides. A flag the examples start to use is added here
# on purpose, after checking that `attncheck fuzz` has it.
KNOWN_FUZZ_FLAGS = {
    "--kernel-lib": True, "--symbol": True, "--kernel": True,
    "--seed": True, "--rounds": True, "--duration": True, "--checkpoint-every": True,
    "--shard": True, "--corpus": True, "--corpus-prune": False,
    "--json": True, "--junit": True, "--cases": True,
}
KNOWN_MERGE_FLAGS = {"--json": True, "--junit": True}

# Durations as `attncheck fuzz` reads them: 90s, 30m, 8h, 1h30m, 2d, or plain seconds.
DURATION = re.compile(r"^(?:(?:\d+(?:\.\d+)?[smhd])+|\d+(?:\.\d+)?)$")
DURATION_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
GHA_EXPR = re.compile(r"\$\{\{.*?\}\}", re.S)
SHELL_OPERATOR = set("();<>|&")

# ---------------------------------------------------------------------------------------------
# Command lines in shell text.

def strip_comment(line):
    """The line without its shell comment: a # that starts a word, outside quotes (${f##*/} stays)."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                i += 1
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace() or line[i - 1] in SHELL_OPERATOR):
            return line[:i]
        i += 1
    return line


def shell_words(line):
    """The words of one shell line, operators (; && | & > ...) as words of their own."""
    lexer = shlex.shlex(strip_comment(line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def simple_commands(script):
    """The simple commands of a shell script, each a list of words; a ${{ }} expression of GitHub
    Actions is kept whole as one word or part of one."""
    exprs = []

    def protect(m):
        exprs.append(m.group(0))
        return f"__GHAEXPR{len(exprs) - 1}__"

    def restore(word):
        return re.sub(r"__GHAEXPR(\d+)__", lambda m: exprs[int(m.group(1))], word)

    text = GHA_EXPR.sub(protect, script)
    text = re.sub(r"\\\n", " ", text)  # continued lines
    commands = []
    for line in text.splitlines():
        try:
            words = shell_words(line)
        except ValueError as e:  # an unbalanced quote
            raise ValueError(f"cannot split the shell line {line.strip()!r}: {e}") from None
        current = []
        for w in words + [";"]:
            if w and all(c in SHELL_OPERATOR for c in w):
                if w[0] in "<>" and current and current[-1].isdigit():
                    current.pop()  # the 2 of 2>file
                if current:
                    commands.append([restore(x) for x in current])
                current = []
            else:
                current.append(w)
    return commands


def find_attncheck(commands, subcommand):
    """The words after `attncheck SUBCOMMAND...` in each command that runs it."""
    found = []
    for words in commands:
        for i, w in enumerate(words):
            if os.path.basename(w) == "attncheck" and words[i + 1:i + 1 + len(subcommand)] == list(subcommand):
                found.append(words[i + 1 + len(subcommand):])
                break
    return found


def parse_flags(words, known, what, checks, positionals_allowed=False):
    """[(flag, value)] of a command's words; every flag must be in `known`. Positionals are
    returned as (None, word)."""
    out = []
    ok = True
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--"):
            flag, eq, value = w.partition("=")
            if flag not in known:
                checks.fail(what, f"unknown flag {flag} (known: {', '.join(sorted(known))})")
                ok = False
                i += 1 if eq or i + 1 >= len(words) or words[i + 1].startswith("-") else 2  # and its value
                continue
            if known[flag]:
                if not eq:
                    if i + 1 >= len(words):
                        checks.fail(what, f"{flag} has no value")
                        return None
                    value = words[i + 1]
                    i += 1
                out.append((flag, value))
            else:
                if eq:
                    checks.fail(what, f"{flag} takes no value")
                    ok = False
                out.append((flag, None))
        elif positionals_allowed:
            out.append((None, w))
        else:
            checks.fail(what, f"unexpected argument {w!r}")
            ok = False
        i += 1
    if ok:
        flags = [f for f, _ in out if f]
        repeated = sorted({f for f in flags if flags.count(f) > 1})
        if repeated:
            checks.fail(what, f"repeated flags: {', '.join(repeated)}")
            ok = False
    return out if ok else None


def duration_seconds(text):
    if not DURATION.match(text):
        return None
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    return sum(float(n) * DURATION_UNIT[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smhd])", text))


def check_fuzz_command(flags, what, checks):
    """The checks every campaign shard command passes; returns its flags as a dict."""
    d = dict(flags)
    if ("--kernel-lib" in d) != ("--symbol" in d):
        checks.fail(what, "--kernel-lib and --symbol go together")
    if "--kernel-lib" not in d and "--kernel" not in d:
        checks.fail(what, "no kernel: --kernel-lib PATH --symbol NAME, or --kernel NAME")
    for flag in ("--seed", "--shard", "--corpus", "--json"):
        if flag not in d:
            checks.fail(what, f"a campaign shard needs {flag}")
    for flag in ("--duration", "--checkpoint-every"):
        if flag in d and duration_seconds(d[flag]) is None:
            checks.fail(what, f"{flag} {d[flag]}: expected a duration such as 90s, 30m, 8h or 1h30m")
    if "--checkpoint-every" in d and "--json" not in d:
        checks.fail(what, "--checkpoint-every needs --json")
    if "--corpus-prune" in d and "--corpus" not in d:
        checks.fail(what, "--corpus-prune needs --corpus")
    for flag in ("--rounds", "--cases"):
        if flag in d and not re.fullmatch(r"[1-9]\d*", d[flag]):
            checks.fail(what, f"{flag} {d[flag]}: expected a positive integer")
    if "--duration" not in d and "--rounds" not in d:
        checks.fail(what, "neither --duration nor --rounds: a shard of one round only")
    return d


def shard_parts(value):
    """(I, N) of --shard I/N, I as written (an expression or a variable), N an int."""
    m = re.fullmatch(r"(.+)/(\d+)", value or "")
    return (m.group(1), int(m.group(2))) if m else (None, None)


def shard_command(found, name, where, checks):
    """Checks the flags of every `attncheck fuzz` command found, [(place, words, context)], and
    returns (place, flags, context, label) of the campaign's shard command, the one with --shard."""
    if not checks.expect(found, f"{name}: runs `attncheck fuzz`", "no `attncheck fuzz` command"):
        return None
    parsed = []
    for place, words, context in found:
        what = f"{name}: {where} {place}: attncheck fuzz"
        flags = parse_flags(words, KNOWN_FUZZ_FLAGS, what, checks)
        if flags is None:
            return None
        checks.ok(f"{what}: flags among the known ones ({' '.join(f for f, _ in flags)})")
        parsed.append((place, flags, context, what))
    shards = [p for p in parsed if any(f == "--shard" for f, _ in p[1])]
    if not checks.expect(len(shards) == 1, f"{name}: one `attncheck fuzz --shard` command", f"found {len(shards)}"):
        return None
    return shards[0]
