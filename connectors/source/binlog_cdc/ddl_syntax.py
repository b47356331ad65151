"""The tokens and column definitions of MySQL's and MariaDB's DDL, for :mod:`.ddl`.

:func:`tokenize` drops comments (``/* */``, ``-- ``, ``#``) and keeps the text of executable
comments (``/*!40101 … */``, ``/*M!100100 … */``), as the server does; names quoted with
backticks (doubled backticks inside) come back unquoted, strings unescaped. :class:`Parser`
offers the recursive descent's steps and parses a column definition (:meth:`Parser.column`) into
a :class:`~.shapes.ColumnDef`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from sluice.connectors.source.binlog_cdc.shapes import ColumnDef, DdlError, TableId, column_def

#: Types of several words (a type's first word is joined with the next while they start one of these).
_MULTI_WORD_TYPES = ("double precision", "character varying", "char varying", "national char varying",
                     "national character varying", "national varchar", "nchar varchar", "nchar varying",
                     "long varchar", "long varbinary")  # fmt: skip


# -- tokens ---------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
    |(?P<exec>/\*M?!\d*)
    |(?P<close>\*/)
    |(?P<comment>/\*.*?\*/|--(?:[ \t\r\n]|$)[^\n]*|\#[^\n]*)
    |(?P<bq>`(?:[^`]|``)*`)
    |(?P<dq>"(?:[^"\\]|\\.|"")*")
    |(?P<str>[Nn]?'(?:[^'\\]|\\.|'')*')
    |(?P<hex>[xXbB]'[0-9a-fA-F]*')
    |(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)
    |(?P<word>[A-Za-z_$@\u0080-\uffff][A-Za-z0-9_$@\u0080-\uffff]*(?:\.(?=[`A-Za-z_]))?)
    |(?P<op><=>|<=|>=|<>|!=|:=|\|\||&&|[(),;=.+\-*/%<>!~^&|?:{}\[\]])
    """,
    re.VERBOSE | re.DOTALL,
)
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}


class Token(NamedTuple):
    kind: str  # word, id (quoted), str, num, hex, op
    text: str  # the word (as written), the unquoted identifier or string, the operator
    raw: str


def tokenize(sql: str) -> list[Token]:
    """The statement's tokens, comments dropped and executable comments' text kept."""
    tokens: list[Token] = []
    pos, exec_depth = 0, 0
    while pos < len(sql):
        m = _TOKEN.match(sql, pos)
        if m is None:
            raise DdlError(f"unexpected character {sql[pos]!r} at {pos}")
        pos = m.end()
        kind = m.lastgroup or ""
        raw = m.group()
        if kind in ("space", "comment"):
            continue
        if kind == "exec":
            exec_depth += 1
        elif kind == "close":
            if not exec_depth:
                raise DdlError(f"unexpected */ at {m.start()}")
            exec_depth -= 1
        elif kind == "bq":
            tokens.append(Token("id", raw[1:-1].replace("``", "`"), raw))
        elif kind == "dq":
            # ANSI_QUOTES aside, a double-quoted text is a string; as a name (after AS, in a
            # column list) the parser takes it either way.
            tokens.append(Token("str", _unescape(raw[1:-1], '"'), raw))
        elif kind == "str":
            body = raw[2:-1] if raw[0] in "Nn" else raw[1:-1]
            tokens.append(Token("str", _unescape(body, "'"), raw))
        elif kind == "word":
            word = raw.rstrip(".")
            tokens.append(Token("word", word, word))
            if raw.endswith("."):
                tokens.append(Token("op", ".", "."))
        else:
            tokens.append(Token(kind, raw, raw))
    return tokens


def _unescape(body: str, quote: str) -> str:
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
        elif ch == quote and i + 1 < len(body) and body[i + 1] == quote:
            out.append(quote)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


# -- statements ------------------------------------------------------------------------------------------

#: Words that start a column attribute or end a column definition (not part of the type).
_COLUMN_END = {",", ")"}


class Parser:
    """Recursive descent over one statement's tokens."""

    def __init__(self, sql: str, *, mariadb: bool = False) -> None:
        self.mariadb = mariadb
        self.tokens = tokenize(sql)
        while self.tokens and self.tokens[-1].text == ";":
            self.tokens.pop()
        self.i = 0

    # -- tokens --

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def at(self, *words: str, ahead: int = 0) -> bool:
        """Whether the next tokens are these keywords/operators (case-insensitive; unquoted)."""
        for k, word in enumerate(words):
            token = self.peek(ahead + k)
            if token is None or token.kind not in ("word", "op") or token.text.upper() != word:
                return False
        return True

    def accept(self, *words: str) -> bool:
        if self.at(*words):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise DdlError(f"expected {' '.join(words)} at {self.where()}")

    def done(self) -> bool:
        return self.i >= len(self.tokens)

    def where(self) -> str:
        token = self.peek()
        return "the end" if token is None else repr(token.raw)

    def next(self) -> Token:
        token = self.peek()
        if token is None:
            raise DdlError("unexpected end of statement")
        self.i += 1
        return token

    def name(self) -> str:
        token = self.next()
        if token.kind not in ("word", "id", "str"):
            raise DdlError(f"expected a name at {token.raw!r}")
        return token.text

    def qualified(self, default_db: str | None) -> TableId:
        first = self.name()
        if self.accept("."):
            return (first, self.name())
        if not default_db:
            raise DdlError(f"table {first} names no database and the statement has no default one")
        return (default_db, first)

    def string(self) -> str:
        token = self.next()
        if token.kind != "str":
            raise DdlError(f"expected a string at {token.raw!r}")
        text = token.text
        while (nxt := self.peek()) is not None and nxt.kind == "str":  # 'a' 'b' is 'ab'
            text += self.next().text
        return text

    def skip_parens(self) -> str:
        """Skip a parenthesised group (at its opening one); its raw text."""
        self.expect("(")
        depth, parts = 1, ["("]
        while depth:
            token = self.next()
            if token.text in ("(", ")") and token.kind == "op":
                depth += 1 if token.text == "(" else -1
            parts.append(token.raw)
        return " ".join(parts).replace("( ", "(").replace(" )", ")")

    def element_end(self) -> bool:
        """Whether a comma or closing parenthesis (or the end) ends the current element."""
        token = self.peek()
        return token is None or (token.kind == "op" and token.text in _COLUMN_END)

    def skip_clause(self) -> None:
        """Skip to the next comma or closing parenthesis at this depth."""
        while not self.element_end():
            if self.at("("):
                self.skip_parens()
            else:
                self.i += 1

    def name_list(self) -> list[str]:
        """``(a, b(10) DESC, ...)``: the names, prefix lengths and orders dropped."""
        self.expect("(")
        names = []
        while True:
            if self.at("("):  # an expression part of a functional index
                self.skip_parens()
            else:
                names.append(self.name())
                if self.at("("):
                    self.skip_parens()
            self.accept("ASC") or self.accept("DESC")
            if self.accept(")"):
                return names
            self.expect(",")

    # -- column definitions --

    def column(self, name: str) -> tuple[ColumnDef, bool]:
        """A column definition after its name; whether it says ``PRIMARY KEY``."""
        type_name = self.name().lower()
        while (nxt := self.peek()) is not None and nxt.kind == "word":
            joined = f"{type_name} {nxt.text.lower()}"
            if not any(t == joined or t.startswith(joined + " ") for t in _MULTI_WORD_TYPES):
                break
            type_name = joined
            self.i += 1
        params: list[str] = []
        if self.accept("("):
            while not self.accept(")"):
                token = self.next()
                if token.text == ",":
                    continue
                params.append(token.text)
        flags: set[str] = set()
        charset = collation = None
        while not self.element_end():
            if self.accept("UNSIGNED"):
                flags.add("unsigned")
            elif self.accept("SIGNED"):
                pass
            elif self.accept("ZEROFILL"):
                flags.add("zerofill")
            elif self.accept("CHARACTER", "SET") or self.accept("CHARSET"):
                self.accept("=")
                charset = self.name().lower()
            elif self.accept("COLLATE"):
                self.accept("=")
                collation = self.name().lower()
            elif self.accept("BINARY") or self.accept("ASCII") or self.accept("UNICODE") or self.accept("BYTE"):
                pass
            else:
                break
        if charset is None and collation:
            charset = collation.split("_", 1)[0]
        return self.attributes(column_def(name, type_name, params, flags, charset, mariadb=self.mariadb))

    def attributes(self, col: ColumnDef) -> tuple[ColumnDef, bool]:  # noqa: C901 - one branch per attribute
        """A column's attributes after its type; whether they say ``PRIMARY KEY``."""
        name = col.name
        primary = False
        while not self.element_end():
            if self.accept("NOT", "NULL"):
                col.nullable = False
            elif self.accept("NULL"):
                col.nullable = True
            elif self.accept("DEFAULT"):
                col.default = self.default_value()
                col.has_default = True
            elif self.accept("AUTO_INCREMENT"):
                col.auto_increment = True
            elif self.accept("PRIMARY", "KEY"):
                primary = True
            elif self.accept("UNIQUE"):
                self.accept("KEY")
            elif self.accept("KEY"):  # KEY alone in a column definition is PRIMARY KEY
                primary = True
            elif self.accept("COMMENT"):
                col.comment = self.string()
            elif self.accept("COLLATE"):
                self.accept("=")
                col.charset = col.charset or self.name().lower().split("_", 1)[0]
            elif self.accept("CHARACTER", "SET") or self.accept("CHARSET"):
                self.accept("=")
                col.charset = self.name().lower()
            elif self.accept("GENERATED", "ALWAYS") or self.at("AS"):
                if self.accept("AS"):
                    if self.accept("ROW"):  # system versioning: AS ROW START|END
                        self.next()
                        continue
                    self.skip_parens()
                    col.generated = True
                self.accept("VIRTUAL") or self.accept("STORED") or self.accept("PERSISTENT")
            elif self.accept("ON", "UPDATE"):
                self.default_value()
            elif self.accept("CHECK"):
                clause = self.skip_parens()
                if is_json_check(clause, col.name):
                    col.json = True
            elif self.skip_attribute():
                pass
            elif self.at("FIRST") or self.at("AFTER"):
                break
            else:
                raise DdlError(f"column {name}: unexpected {self.where()}")
        if primary:
            col.nullable = False
        return col, primary

    def skip_attribute(self) -> bool:
        """Skip a column attribute that changes nothing captured (``False``: none here)."""
        if self.accept("VIRTUAL") or self.accept("STORED") or self.accept("PERSISTENT"):
            return True
        if self.accept("CONSTRAINT"):
            if not self.at("CHECK"):
                self.name()
            return True
        if self.accept("REFERENCES"):
            self.qualified("-")
            if self.at("("):
                self.skip_parens()
            self.skip_clause()
            return True
        if self.accept("COLUMN_FORMAT") or self.accept("STORAGE") or self.accept("SRID"):
            self.next()
            return True
        if self.accept("COMPRESSED"):
            if self.accept("="):
                self.next()
            return True
        if self.at("ENGINE_ATTRIBUTE") or self.at("SECONDARY_ENGINE_ATTRIBUTE"):
            self.next()
            self.accept("=")
            self.next()
            return True
        return (
            self.accept("WITH", "SYSTEM", "VERSIONING")
            or self.accept("WITHOUT", "SYSTEM", "VERSIONING")
            or self.accept("INVISIBLE")
            or self.accept("VISIBLE")
        )

    def default_value(self) -> str | None:
        if self.at("("):
            return self.skip_parens()
        token = self.next()
        if token.kind == "op" and token.text in ("-", "+"):
            return token.text + self.next().raw
        if token.kind == "str":  # a text's value, unquoted, as Debezium records it
            text = token.text
            while (nxt := self.peek()) is not None and nxt.kind == "str":
                text += self.next().text
            return text
        if token.kind == "word" and token.text.upper() == "NULL":
            return None
        if (
            token.kind == "word"
            and token.text.startswith("_")
            and (nxt := self.peek()) is not None
            and nxt.kind == "str"
        ):
            return self.next().text  # a character set introducer: _utf8mb4'text'
        text = token.raw
        if self.at("("):
            text += self.skip_parens()
        return text


def json_check_column(clause: str) -> str | None:
    """The column of MariaDB's JSON check, ``(json_valid(`col`))``; ``None`` for other checks."""
    m = _JSON_CHECK.fullmatch(clause)
    return m.group(1).replace("``", "`") if m else None


def is_json_check(clause: str, column: str) -> bool:
    named = json_check_column(clause)
    return named is not None and named.lower() == column.lower()


_JSON_CHECK = re.compile(r"\(\s*json_valid\s*\(\s*`?((?:[^`]|``)+?)`?\s*\)\s*\)", re.IGNORECASE)
