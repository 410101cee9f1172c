"""Every citation in the package names the paper's own numbering (issue 30): a "§" section, an appendix, a figure,
an equation or a table that "The Art of Scaling Reinforcement Learning Compute for LLMs" (arXiv 2510.13786, and
its ICLR 2026 camera-ready) has; none names the private summary it was first written from, or a design file
outside the repository. docs/architecture.md gives the table from the summary's headings to these references."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "scalerl"

# The paper's numbering. Sections: 1 Introduction, 2 Preliminaries & Setup (2.1 Predictive compute-scaling and
# fitting curves), 3 An Empirical Study of RL Scaling (3.1 Asynchronous RL Setup, 3.2 Algorithmic Choices),
# 4 ScaleRL, 5 Predictable Scaling Returns Across RL Compute Axes, 6 Related Work, 7 Discussion & Conclusion,
# 8 Acknowledgments. Appendices A.1-A.17 (A.17.1-A.17.4) in arXiv v1; the ICLR text adds A.18-A.21.
# Figures 1-20 (arXiv), to 26 (ICLR); Equations 1-9; one table.
SECTIONS = {"1", "2", "2.1", "3", "3.1", "3.2", "4", "5", "6", "7", "8"}
APPENDICES = {f"A.{n}" for n in range(1, 22)} | {f"A.17.{n}" for n in range(1, 5)}
FIGURES = set(range(1, 27))
EQUATIONS = set(range(1, 10))
TABLES = {1}

SECTION = re.compile(r"§ ?(\d+(?:\.\d+)*[a-z]?)")
APPENDIX = re.compile(r"(?<![\w.])A\.(\d+(?:\.\d+)?)\b")
FIGURE = re.compile(r"\bFigs?\. ?(\d+)[a-z]?\b")
EQUATION = re.compile(r"\bEq\. ?(\d+)\b")
TABLE = re.compile(r"\bTable (\d+)\b")
# names that are not the repository's: the internal summary, its notes, and the old design file
PRIVATE = ("design" + ".md", "paper" + "_spec", "env" + "_feasibility")


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and string literal (docstrings, messages, f-string text) in ``source``."""
    kinds = {tokenize.COMMENT, tokenize.STRING} | {getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type in kinds]


def bad_citations(source: str) -> list[str]:
    """Each reference in ``source``'s comments and strings that the paper does not have, as ``line: ref``."""
    bad = []
    for line, text in prose(source):
        bad += [f"{line}: §{m.group(1)}" for m in SECTION.finditer(text) if m.group(1) not in SECTIONS]
        bad += [f"{line}: A.{m.group(1)}" for m in APPENDIX.finditer(text) if f"A.{m.group(1)}" not in APPENDICES]
        bad += [f"{line}: {m.group(0)}" for m in FIGURE.finditer(text) if int(m.group(1)) not in FIGURES]
        bad += [f"{line}: {m.group(0)}" for m in EQUATION.finditer(text) if int(m.group(1)) not in EQUATIONS]
        bad += [f"{line}: {m.group(0)}" for m in TABLE.finditer(text) if int(m.group(1)) not in TABLES]
    return bad


def test_the_checker_tells_the_papers_numbering_from_the_summarys():
    """Hand-made cases: the summary's "§3.6" and "§5.5", a "§4b" of another note and a "Fig. 40" are refused; the
    paper's "§3.2, Fig. 6a", "App. A.17.2", "ICLR A.19", "Eq. 9", "Table 1" and "§1–§2" pass; code is not prose."""
    good = '"""Zero-variance filtering (§3.2, Fig. 6a; App. A.17.2, ICLR A.19, Eq. 9, Table 1, §1–§2)."""\n'
    assert bad_citations(good) == []
    wrong = ('"""Filtering (§3.6)."""\nx = 1  # LOO (§5.5), speed (§4b)\n'
             'msg = f"see {x} (Fig. 40, A.22, Eq. 12, Table 2)"\n')
    assert bad_citations(wrong) == ["1: §3.6", "2: §5.5", "2: §4b", "3: A.22", "3: Fig. 40", "3: Eq. 12",
                                    "3: Table 2"]
    assert bad_citations("a = b.A.33  # no citation here\n") == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_citation_names_a_part_of_the_paper(path: Path):
    bad = bad_citations(path.read_text(encoding="utf-8"))
    assert not bad, f"{path.relative_to(ROOT)} cites what the paper does not have: {bad}"


def test_nothing_points_outside_the_repository():
    """No file under scalerl/ or tests/ cites the design file that lived outside the repository, the internal
    summary, or its notes: the design is docs/architecture.md."""
    hits = [f"{p.relative_to(ROOT)}:{n}: {name}"
            for folder in ("scalerl", "tests") for p in sorted((ROOT / folder).rglob("*.py"))
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            for name in PRIVATE if name in line]
    assert not hits, hits
