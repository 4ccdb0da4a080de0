#!/usr/bin/env python3
"""The house rules a compiler does not check (docs/contributing.md, "House rules").

- **No circle of `use` between files.** Cargo refuses a circle between crates; this is the same
  rule one level down. File A uses file B when A's code names a path that lands on an item B
  defines: `use crate::x::Y`, `super::Y`, `child::f()`, through any `use` that re-exports it. A
  module re-exporting its own descendants (`pub use memory::MemoryRests` in `rest/mod.rs`) is the
  module's face, not a use; a `mod x;` declaration is not a use either.
- **Citations that name a section.** `docs/X.md §N` (also `X.md §N`, `design §N`, and a bare
  `§N` inside `docs/X.md` itself) must name a numbered heading of that document; a `§` in code
  must say which document it cites.
- **No "issue N".** The issue tracker is not part of the repository; a reader cannot follow it.
  The applied migrations are exempt: sqlx records each one's checksum, so an applied migration is
  never edited, not even a comment.
- **The fleet's parts are built in one place.** A Redis part of the fleet's state
  (`RedisRests`, `RedisEvents`, `RedisLeases`, `RedisPacer`, `RedisMetrics`, `RedisLedger`,
  `RedisUnsaved`) is constructed in `src/fleet/` (the `RedisFleet` a process builds once) and
  nowhere else but tests, so no code builds one per call or with settings of its own.
- **The README's folder map is the tree.** Every folder at the top is in the map, every folder
  the map opens lists all its folders, every path it names exists; the README is at most 6 KB.

Usage: scripts/check_tree.py [ROOT]   (default: this repository)
Exit 0 when the tree keeps every rule; 1 with one line per violation when it does not.
"""

import os
import re
import subprocess
import sys

README_LIMIT = 6 * 1024
# Where the folder map lives in the README: the first fenced block after this heading.
MAP_HEADING = "## The folders"
SKIP_DIRS = {".git", "target", "node_modules"}
# This check and its test spell out what they look for; their text is not a citation.
SELF = ("scripts/check_tree.py", "scripts/test_check_tree.py")
TEXT_SUFFIXES = (".rs", ".md", ".toml", ".sh", ".py", ".sql", ".ts", ".js", ".html", ".yml", ".lua")


# ---------------------------------------------------------------------------------------------
# The files of the tree


def tree_files(root):
    """Every file of the tree, relative to root: git's list when root is a checkout (so build
    output and ignored files do not count), else a walk."""
    if os.path.isdir(os.path.join(root, ".git")):
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, text=True, check=True,
        ).stdout
        return sorted(p for p in out.splitlines() if os.path.exists(os.path.join(root, p)))
    found = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for f in files:
            found.append(os.path.relpath(os.path.join(dirpath, f), root))
    return sorted(found)


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as fh:
        return fh.read()


def text_files(root, files):
    """(path, text) of every file whose prose the rules read: not the applied migrations (sqlx
    keeps each one's checksum, so an applied migration is never edited, not even a comment), not
    this check and its test (they spell out what they look for)."""
    for rel in files:
        if not rel.endswith(TEXT_SUFFIXES) or rel.startswith("migrations/") or rel in SELF:
            continue
        try:
            yield rel, read(root, rel)
        except (UnicodeDecodeError, OSError):
            continue


# ---------------------------------------------------------------------------------------------
# Rust source: comments and literals out, modules, items, uses


def strip(text):
    """The code without comments, strings and char literals, so prose names no module. Newlines
    are kept, so offsets still map to lines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        prev = text[i - 1] if i else " "
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif c in "rb" and not (prev.isalnum() or prev == "_") and re.match(r'b?r(#*)"', text[i:]):
            m = re.match(r'b?r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            start = i
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""' + "\n" * text.count("\n", start, i))
        elif c == "'" and re.match(r"'(\\[^']{1,10}|[^\\'])'", text[i:]):
            i += len(re.match(r"'(\\[^']{1,10}|[^\\'])'", text[i:]).group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


MOD_DECL = re.compile(r'((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*([;{])')
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]')
USE = re.compile(r"(?<![\w$])(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
ITEM = re.compile(
    r"(?<![\w$])(?:struct|enum|trait|fn|type|const|static|union|macro_rules!)\s+([A-Za-z_]\w*)"
)
PATH = re.compile(r"(?<![\w:$])((?:[a-z_][a-z0-9_]*)(?:\s*::\s*[A-Za-z_]\w*)+)")


def raw_mod_decls(text):
    """`mod x;` and `mod x { ... }` as (name, path attribute or None, inline?, offset), read from
    the original text (a `#[path]` is a string, which `strip` blanks)."""
    code = strip(text)
    lines = text.splitlines()
    decls = []
    for m in MOD_DECL.finditer(code):
        # `strip` blanked the attribute's string and shortened what came before it; `strip`
        # keeps lines, so read the attribute from the original lines around the declaration.
        line_no = code.count("\n", 0, m.start())
        window = "\n".join(lines[max(0, line_no - 3) : line_no + 1])
        path = None
        if "path" in m.group(1):
            found = PATH_ATTR.findall(window)
            path = found[-1] if found else None
        decls.append((m.group(2), path, m.group(3) == "{", m.start()))
    return decls


class Crate:
    """One compilation root (a lib, a bin, an example, a test binary) and the files it reaches
    by `mod` declarations."""

    def __init__(self, root_dir, root_file):
        self.root_dir = root_dir
        self.root_file = root_file  # relative to root_dir
        self.mods = {}  # module path (tuple) -> file (relative to root_dir)
        self.code = {}  # file -> stripped code
        self.inline = {}  # file -> [(start, end, module path)] of its inline modules
        self._load((), root_file, mod_rs=True)

    def _load(self, key, rel, mod_rs):
        full = os.path.join(self.root_dir, rel)
        if not os.path.isfile(full) or rel in self.code:
            return
        self.mods[key] = rel
        text = open(full, encoding="utf-8").read()
        code = strip(text)
        self.code[rel] = code
        self.inline[rel] = []
        here = os.path.dirname(rel)
        children_dir = here if mod_rs else os.path.join(here, os.path.splitext(os.path.basename(rel))[0])
        spans = []
        for name, path, inline, offset in raw_mod_decls(text):
            outer = [s for s in spans if s[0] <= offset <= s[1]]
            prefix = tuple(s[2][-1] for s in outer)
            if inline:
                end = block_end(code, code.find("{", offset))
                spans.append((offset, end, key + prefix + (name,)))
                continue
            sub_dir = os.path.join(children_dir, *prefix)
            if path:
                # A file named by `#[path]` keeps its children beside it, as a mod.rs does.
                child, child_mod_rs = os.path.join(here, path), True
            elif os.path.isfile(os.path.join(self.root_dir, sub_dir, name + ".rs")):
                child, child_mod_rs = os.path.join(sub_dir, name + ".rs"), False
            else:
                child, child_mod_rs = os.path.join(sub_dir, name, "mod.rs"), True
            self._load(key + prefix + (name,), os.path.normpath(child), child_mod_rs)
        self.inline[rel] = spans
        for start, end, mod in spans:
            self.mods.setdefault(mod, rel)

    def module_at(self, rel, key, offset):
        """The module path of code at `offset` in file `rel` (inline modules included)."""
        best = key
        for start, end, mod in self.inline.get(rel, []):
            if start <= offset <= end and len(mod) > len(best):
                best = mod
        return best


def block_end(code, open_brace):
    depth = 0
    for k in range(open_brace, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code)


def expand(tree):
    """`a::{b, c::{d as e}}` -> [(["a","b"], "b"), (["a","c","d"], "e")]: each leaf's path and
    the name it is known by here."""
    tree = re.sub(r"\s+", " ", tree).strip()
    out = []

    def walk(prefix, s):
        depth, start, parts = 0, 0, []
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        for p in parts:
            p = p.strip()
            if not p:
                continue
            if "{" in p:
                head, rest = p.split("{", 1)
                head = [x.strip() for x in head.split("::") if x.strip()]
                walk(prefix + head, rest[: rest.rfind("}")])
                continue
            alias = None
            m = re.match(r"(.*)\s+as\s+(\w+)$", p)
            if m:
                p, alias = m.group(1), m.group(2)
            segs = prefix + [x.strip() for x in p.split("::") if x.strip()]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            if segs:
                out.append((segs, alias or segs[-1]))

    walk([], tree)
    return out


class Graph:
    """Which file of a crate uses which, and by which names."""

    def __init__(self, crate):
        self.crate = crate
        # file -> its uses: [(offset, segments, name here, pub?)]
        self.uses = {}
        # file -> item names it defines
        self.items = {}
        for key, rel in crate.mods.items():
            if rel in self.uses:
                continue
            code = crate.code[rel]
            uses = []
            for m in USE.finditer(code):
                for segs, name in expand(m.group(2)):
                    uses.append((m.start(), segs, name, bool(m.group(1))))
            self.uses[rel] = uses
            self.items[rel] = set(ITEM.findall(code))
        self.edges = {rel: {} for rel in crate.code}  # file -> {file: set of names}
        self._build()

    def file_key(self, rel):
        keys = [k for k, f in self.crate.mods.items() if f == rel]
        return min(keys, key=len)

    def _resolve(self, rel, here, segs, depth=0):
        """(file, name) where a path used in `rel` (inside module `here`) lands, "module" when it
        names a module, or None when it leaves the crate."""
        if depth > 12 or not segs:
            return None
        mods = self.crate.mods
        segs = list(segs)
        if segs[0] == "crate":
            mod, rest = (), segs[1:]
        elif segs[0] in ("self", "super"):
            mod = list(here)
            while segs and segs[0] in ("self", "super"):
                if segs[0] == "super":
                    if not mod:
                        return None
                    mod.pop()
                segs = segs[1:]
            mod, rest = tuple(mod), segs
        elif tuple(here) + (segs[0],) in mods:
            mod, rest = tuple(here), segs
        else:
            alias = [u for u in self.uses[rel] if u[2] == segs[0]]
            if not alias:
                return None
            return self._resolve(rel, here, alias[0][1] + segs[1:], depth + 1)
        while rest and mod + (rest[0],) in mods:
            mod, rest = mod + (rest[0],), rest[1:]
        if mod not in mods:
            return None
        target = mods[mod]
        if not rest:
            return ("module", target)
        name = rest[0]
        if name in self.items[target]:
            return (target, name)
        # Not defined there: reached through one of that file's own `use`s.
        for offset, usegs, uname, _ in self.uses[target]:
            if uname == name:
                found = self._resolve(target, mod, usegs + rest[1:], depth + 1)
                if found and found[0] != "module":
                    return found
            if uname == "*":
                found = self._resolve(target, mod, usegs[:-1] + rest, depth + 1)
                if found and found[0] not in ("module", target):
                    return found
        return (target, name)

    def _add(self, rel, found, name):
        if found and found[0] != "module" and found[0] != rel:
            self.edges[rel].setdefault(found[0], set()).add(found[1] if found[1] != "*" else name)

    def _build(self):
        for rel, code in self.crate.code.items():
            key = self.file_key(rel)
            spans = []
            for offset, segs, name, public in self.uses[rel]:
                here = self.crate.module_at(rel, key, offset)
                if segs[-1] == "*":
                    found = self._resolve(rel, here, segs[:-1])
                    if found and found[0] == "module":
                        found = (found[1], "*")
                else:
                    found = self._resolve(rel, here, segs)
                if found is None or found[0] == "module":
                    continue
                target_key = self.file_key(found[0])
                if public and target_key[: len(key)] == key:
                    continue  # a module's face: it re-exports its own descendant
                self._add(rel, found, name)
            for m in USE.finditer(code):
                spans.append((m.start(), m.end()))
            for m in PATH.finditer(code):
                if any(a <= m.start() < b for a, b in spans):
                    continue
                segs = [s.strip() for s in m.group(1).split("::")]
                here = self.crate.module_at(rel, key, m.start())
                found = self._resolve(rel, here, segs)
                self._add(rel, found, segs[-1])

    def circles(self):
        """Strongly connected sets of more than one file (Tarjan), each as one concrete loop."""
        graph = {v: sorted(w for w in ws if w in self.edges) for v, ws in self.edges.items()}
        index, low, stack, on, comps = {}, {}, [], set(), []
        counter = [0]

        def visit(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in graph[v]:
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))

        sys.setrecursionlimit(20000)
        for v in sorted(graph):
            if v not in index:
                visit(v)
        return [(comp, self._loop(graph, comp)) for comp in comps]

    @staticmethod
    def _loop(graph, comp):
        """The shortest loop through the component's first file."""
        members, start = set(comp), comp[0]
        frontier, parent = [start], {start: None}
        while frontier:
            nxt = []
            for v in frontier:
                for w in graph[v]:
                    if w == start:
                        path = [v]
                        while parent[path[-1]] is not None:
                            path.append(parent[path[-1]])
                        return list(reversed(path)) + [start]
                    if w in members and w not in parent:
                        parent[w] = v
                        nxt.append(w)
            frontier = nxt
        return comp


def crate_roots(files):
    """Every compilation root of every crate of the workspace: its lib and bins, its examples,
    its test binaries and its benches."""
    crates = sorted(os.path.dirname(f) for f in files if os.path.basename(f) == "Cargo.toml")
    roots = []
    for f in files:
        if not f.endswith(".rs"):
            continue
        owner = max((c for c in crates if not c or f.startswith(c + "/")), key=len, default=None)
        if owner is None:
            continue
        parts = (f[len(owner) + 1 :] if owner else f).split("/")
        if parts in (["src", "lib.rs"], ["src", "main.rs"]):
            roots.append(f)
        elif len(parts) == 3 and parts[:2] == ["src", "bin"]:
            roots.append(f)
        elif len(parts) == 2 and parts[0] in ("examples", "tests", "benches"):
            roots.append(f)
        elif len(parts) == 3 and parts[0] in ("examples", "tests", "benches") and parts[2] == "main.rs":
            roots.append(f)
    return roots


def check_circles(root, files):
    problems = []
    for entry in crate_roots(files):
        crate = Crate(root, entry)
        graph = Graph(crate)
        for comp, loop in graph.circles():
            steps = [loop[0]]
            for a, b in zip(loop, loop[1:]):
                names = ", ".join(sorted(graph.edges[a][b]))
                steps.append(f"({names}) {b}")
            problems.append(
                f"{entry}: a circle of {len(comp)} files: " + " -> ".join(steps)
                + " — move what they share below them"
            )
    return problems


# ---------------------------------------------------------------------------------------------
# Citations of docs sections

HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", re.M)
# One section number, with what it is about in brackets after it: `§4.8 (fair share)`.
ONE = r"§?\s?\d+(?:\.\d+)*(?:\s\([^()§]{0,80}\))?"
# A list of sections: `§4.8, §4.9`, `§2.2 to §2.5`, `§4.8 (fair share) and §4.9`.
SECTION_LIST = r"§\s?\d+(?:\.\d+)*(?:\s\([^()§]{0,80}\))?(?:(?:,\s*|\s+(?:and|or|to)\s+|\s*[–-]\s*)§\s?\d+(?:\.\d+)*(?:\s\([^()§]{0,80}\))?)*"
# A document named without a section, whose paragraph may cite one of its sections after it.
MENTION = re.compile(r"(?:docs/)?\b([\w-]+\.md)\b")
# A blank line, in prose or in a comment block, ends the paragraph a citation belongs to.
PARAGRAPH_END = re.compile(r"\n\s*(?://[/!]?|#|--)?\s*\n")
NUMBER = re.compile(r"(?<=§)\s?(\d+(?:\.\d+)*)")


def sections(root, doc):
    """The section numbers of docs/DOC, or None when there is no such document."""
    path = os.path.join(root, "docs", doc)
    if not os.path.isfile(path):
        return None
    return set(HEADING.findall(read(root, os.path.join("docs", doc))))


def citations(text, stems):
    """(offset, document or None, section numbers) of every `§` citation of a text: a named
    document's, or a bare one."""
    named = re.compile(
        r"(?:(?:docs/)?([\w-]+\.md)\)?|\b(" + stems + r"))[,:]?\s*(?:\(\s*)?(" + SECTION_LIST + ")"
    )
    found, covered = [], []
    mentions = [(m.start(), m.end(), m.group(1)) for m in MENTION.finditer(text)]
    for m in named.finditer(text):
        doc = m.group(1) or (m.group(2) + ".md")
        covered.append((m.start(3), m.end(3), doc))
        found.append((m.start(3), doc, [n.strip() for n in NUMBER.findall(m.group(3))]))
    for m in re.finditer(SECTION_LIST, text):
        if any(a <= m.start() < b for a, b, _ in covered):
            continue
        if re.search(r"RFC \d+\s*$", text[max(0, m.start() - 12) : m.start()]):
            continue  # an RFC's own section
        # A bare `§N` goes on citing the document its paragraph last named ("docs/design.md
        # §2.1 and the walk rules of §2.2").
        doc = None
        for a, b, d in covered + mentions:
            if 0 <= m.start() - b < 300 and not PARAGRAPH_END.search(text[b : m.start()]):
                doc = d
        found.append((m.start(), doc, [n.strip() for n in NUMBER.findall(m.group(0))]))
    return found


def check_citations(root, files):
    problems = []
    docs = {os.path.basename(f) for f in files if f.startswith("docs/") and f.endswith(".md")}
    stems = "|".join(sorted(re.escape(d[:-3]) for d in docs)) or "(?!)"
    for rel, text in text_files(root, files):
        if "§" not in text:
            continue
        own = os.path.basename(rel) if rel.startswith("docs/") and rel.endswith(".md") else None
        for offset, doc, numbers in citations(text, stems):
            no = text.count("\n", 0, offset) + 1
            if doc is None and own is None:
                problems.append(
                    f"{rel}:{no}: '§{numbers[0]}' names no document (write docs/X.md §N)"
                )
                continue
            doc = doc or own
            have = sections(root, doc)
            if have is None:
                problems.append(f"{rel}:{no}: cites {doc}, which is not in docs/")
                continue
            for num in numbers:
                if num not in have:
                    problems.append(f"{rel}:{no}: {doc} has no §{num}")
    return problems


# ---------------------------------------------------------------------------------------------
# "issue N"

ISSUE = re.compile(r"\bissues?\s+#?\d+", re.I)


def check_issues(root, files):
    problems = []
    for rel, text in text_files(root, files):
        for no, line in enumerate(text.splitlines(), 1):
            m = ISSUE.search(line)
            if m:
                problems.append(
                    f"{rel}:{no}: cites '{m.group(0)}', which a reader of the repository cannot "
                    "see: say what it is (an outside project's as owner/repo#N)"
                )
    return problems


# ---------------------------------------------------------------------------------------------
# The fleet's parts, built in one place

FLEET_MODULE = "src/fleet/"
FLEET_PART = re.compile(r"\bRedis(Rests|Events|Leases|Pacer|Metrics|Ledger|Unsaved)\s*::\s*new\b")


def is_test_path(rel):
    return "tests" in rel.split("/")[:-1]


def check_fleet_parts(root, files):
    problems = []
    for rel in files:
        if not rel.endswith(".rs") or rel.startswith(FLEET_MODULE) or is_test_path(rel):
            continue
        try:
            code = strip(read(root, rel))
        except (UnicodeDecodeError, OSError):
            continue
        for no, line in enumerate(code.splitlines(), 1):
            m = FLEET_PART.search(line)
            if m:
                problems.append(
                    f"{rel}:{no}: builds Redis{m.group(1)} itself: take it from the process's "
                    "RedisFleet (src/fleet/), which builds every part once"
                )
    return problems


# ---------------------------------------------------------------------------------------------
# The README


def folder_map(readme):
    """The README's folder map: (line number, path) of every entry, folders ending in '/'."""
    lines = readme.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == MAP_HEADING)
    except StopIteration:
        return None
    fence = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("```")), None)
    if fence is None:
        return None
    entries, stack = [], []  # stack: (indent, folder path)
    for i in range(fence + 1, len(lines)):
        line = lines[i]
        if line.startswith("```"):
            break
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        head = re.split(r"\s{2,}", line.strip())[0]
        if not re.match(r"^[\w.\-/]+(,\s*[\w.\-/]+)*$", head):
            continue  # a continued description
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        for name in re.split(r",\s*", head):
            entries.append((i + 1, parent + name))
        if head.endswith("/") and "," not in head:
            stack.append((indent, parent + head))
    return entries


def check_readme(root, files):
    problems = []
    if "README.md" not in files:
        return ["README.md: missing"]
    readme = read(root, "README.md")
    size = len(readme.encode("utf-8"))
    if size > README_LIMIT:
        problems.append(f"README.md: {size} bytes, more than {README_LIMIT}: move the detail into docs/")
    entries = folder_map(readme)
    if entries is None:
        return problems + [f"README.md: no folder map (a fenced block under '{MAP_HEADING}')"]
    folders = {os.path.dirname(f) for f in files}
    all_folders = set()
    for f in folders:
        parts = f.split("/")
        for k in range(1, len(parts) + 1):
            all_folders.add("/".join(parts[:k]))
    all_folders.discard("")
    named = set()
    for no, path in entries:
        bare = path.rstrip("/")
        named.add(bare)
        is_dir = bare in all_folders
        if path.endswith("/") and not is_dir:
            problems.append(f"README.md:{no}: the map names {path}, which is not a folder of the tree")
        elif not path.endswith("/") and bare not in files and not is_dir:
            problems.append(f"README.md:{no}: the map names {path}, which is not in the tree")
    opened = {""} | {os.path.dirname(p.rstrip("/")) for _, p in entries}
    for folder in sorted(all_folders):
        parent = os.path.dirname(folder)
        if folder.split("/")[0].startswith("."):
            continue
        if parent in opened and folder not in named:
            where = "at the top" if not parent else f"in {parent}/"
            problems.append(f"README.md: the folder map leaves out {folder}/ ({where})")
    return problems


# ---------------------------------------------------------------------------------------------


def main(argv):
    root = os.path.abspath(argv[0]) if argv else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = tree_files(root)
    problems = (
        check_circles(root, files)
        + check_citations(root, files)
        + check_issues(root, files)
        + check_fleet_parts(root, files)
        + check_readme(root, files)
    )
    for p in problems:
        print(p)
    if problems:
        print(f"check_tree: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check_tree: no circle between files, every citation names a section, the fleet's parts are "
          "built in one place, the README maps the tree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
