#!/usr/bin/env python3
"""Tests of scripts/check_tree.py: a small tree that keeps every rule passes, and each planted
violation — a circle of `use`, a dead citation, an "issue N", a fleet part built outside
src/fleet/, a README map that misses a folder
or names one that is not there, a README over 6 KB — fails with a line that names it.

Run: python3 scripts/test_check_tree.py
"""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_tree  # noqa: E402

README = """# tiny

A tree that keeps the house rules.

## The folders

```
src/              the library
  store/            where things are kept
docs/             what it does
```
"""

DOC = """# What it does

## 1. The run

### 1.1 Steps

## 2. The store
"""


class Tree:
    """A scratch repository: a crate with `src/lib.rs`, a docs folder and a README."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        self.write("Cargo.toml", '[package]\nname = "tiny"\n')
        self.write("README.md", README)
        self.write("docs/design.md", DOC)
        self.write("src/lib.rs", "//! See docs/design.md §1.1.\n\nmod a;\nmod b;\nmod store;\n")
        self.write("src/a.rs", "use crate::b::B;\n\npub struct A(pub B);\n")
        self.write("src/b.rs", "pub struct B;\n")
        self.write("src/store/mod.rs", "mod memory;\n\npub use memory::Memory;\n\npub trait Store {}\n")
        self.write("src/store/memory.rs", "use super::Store;\n\npub struct Memory;\nimpl Store for Memory {}\n")

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)

    def check(self):
        """(exit status, what the check printed)."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = check_tree.main([self.root])
        return status, out.getvalue()

    def close(self):
        self.dir.cleanup()


class CheckTree(unittest.TestCase):
    def setUp(self):
        self.tree = Tree()

    def tearDown(self):
        self.tree.close()

    def assert_fails_naming(self, *needles):
        status, out = self.tree.check()
        self.assertEqual(status, 1, out)
        for needle in needles:
            self.assertIn(needle, out)

    def test_a_tree_that_keeps_the_rules_passes(self):
        status, out = self.tree.check()
        self.assertEqual(status, 0, out)

    def test_a_circle_of_use_fails_naming_its_files_and_names(self):
        self.tree.write("src/b.rs", "use crate::a::A;\n\npub struct B;\npub fn first(a: &A) {}\n")
        self.assert_fails_naming("src/a.rs", "src/b.rs", "(A)", "(B)")

    def test_a_circle_through_an_inline_path_fails_too(self):
        self.tree.write("src/b.rs", "pub struct B;\npub fn make() -> B { let _ = crate::a::A(B); B }\n")
        self.assert_fails_naming("src/a.rs", "src/b.rs")

    def test_a_parent_that_uses_its_child_which_uses_it_back_is_a_circle(self):
        self.tree.write(
            "src/store/mod.rs",
            "mod memory;\n\npub trait Store {}\npub fn open() -> memory::Memory { memory::Memory }\n",
        )
        self.assert_fails_naming("src/store/mod.rs", "src/store/memory.rs", "(Store)")

    def test_a_parent_that_only_reexports_its_child_is_no_circle(self):
        status, out = self.tree.check()  # src/store: `pub use memory::Memory`, memory uses Store
        self.assertEqual(status, 0, out)

    def test_a_dead_citation_fails(self):
        self.tree.write("src/b.rs", "/// The store (docs/design.md §3).\npub struct B;\n")
        self.assert_fails_naming("src/b.rs:1", "design.md has no §3")

    def test_a_citation_of_a_missing_document_fails(self):
        self.tree.write("src/b.rs", "/// See docs/guide.md §1.\npub struct B;\n")
        self.assert_fails_naming("cites guide.md, which is not in docs/")

    def test_a_section_in_code_must_name_its_document(self):
        self.tree.write("src/b.rs", "/// As §1.1 says.\npub struct B;\n")
        self.assert_fails_naming("src/b.rs:1", "names no document")

    def test_a_bare_section_in_a_document_cites_that_document(self):
        self.tree.write("docs/design.md", DOC + "\nAs §2 says, and §4.\n")
        self.assert_fails_naming("docs/design.md:9", "design.md has no §4")

    def test_a_section_after_a_named_one_cites_the_same_document(self):
        self.tree.write("src/b.rs", "/// docs/design.md §1 and the store of §2, not §7.\npub struct B;\n")
        self.assert_fails_naming("design.md has no §7")

    def test_issue_numbers_fail(self):
        self.tree.write("src/b.rs", "// Added for issue 12.\npub struct B;\n")
        self.assert_fails_naming("src/b.rs:1", "'issue 12'")

    def test_a_fleet_part_built_outside_the_fleet_module_fails(self):
        self.tree.write("src/b.rs", "pub struct B;\npub fn p(c: C) { let _ = RedisPacer::new(c, \"ns\"); }\n")
        self.assert_fails_naming("src/b.rs:2", "builds RedisPacer itself")

    def test_a_fleet_part_path_qualified_fails_too(self):
        self.tree.write("src/b.rs", "pub struct B;\npub fn e(c: C) { freeway::events::RedisEvents::new(c, \"ns\"); }\n")
        self.assert_fails_naming("src/b.rs:2", "builds RedisEvents itself")

    def test_the_fleet_module_and_tests_may_build_fleet_parts(self):
        part = "pub fn r(c: C) { let _ = RedisRests::new(c, \"ns\"); }\n"
        self.tree.write("src/fleet/mod.rs", part)
        self.tree.write("src/lib.rs", "//! See docs/design.md §1.1.\n\nmod a;\nmod b;\nmod fleet;\nmod store;\n")
        self.tree.write("tests/rests.rs", part)
        self.tree.write("src/b.rs", "/// Not RedisRests::new(c) in a comment.\npub struct B;\n")
        self.tree.write("README.md", README.replace(
            "  store/            where things are kept\n",
            "  fleet/            shared state\n  store/            where things are kept\n",
        ).replace("docs/             what it does\n", "docs/             what it does\ntests/            tests\n"))
        status, out = self.tree.check()
        self.assertEqual(status, 0, out)

    def test_an_applied_migration_may_keep_its_issue_number(self):
        self.tree.write("migrations/0001_first.sql", "-- The store of issue 4.\nCREATE TABLE t (x INT);\n")
        self.tree.write("README.md", README.replace(
            "docs/             what it does\n", "docs/             what it does\nmigrations/       SQL\n"))
        status, out = self.tree.check()
        self.assertEqual(status, 0, out)

    def test_a_readme_map_that_misses_a_folder_fails(self):
        self.tree.write("benches/speed.rs", "fn main() {}\n")
        self.assert_fails_naming("leaves out benches/")

    def test_an_opened_folder_must_list_all_its_folders(self):
        self.tree.write("src/pace/mod.rs", "pub struct Pace;\n")
        self.assert_fails_naming("leaves out src/pace/ (in src/)")

    def test_a_readme_map_that_names_a_missing_folder_fails(self):
        self.tree.write("README.md", README.replace(
            "  store/            where things are kept\n",
            "  store/            where things are kept\n  rest/             rests\n"))
        self.assert_fails_naming("names src/rest/, which is not a folder")

    def test_a_readme_over_six_kilobytes_fails(self):
        self.tree.write("README.md", README + "\n" + "words " * 1100)
        self.assert_fails_naming("README.md:", "more than 6144")


if __name__ == "__main__":
    unittest.main(verbosity=1)
