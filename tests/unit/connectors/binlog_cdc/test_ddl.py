"""The DDL parser: each statement leaves the table shapes the server would have, column by column
as ``information_schema`` prints them, and a statement it cannot follow changes nothing."""

from __future__ import annotations

import pytest

from sluice.connectors.source.binlog_cdc.ddl import SchemaModel
from sluice.connectors.source.binlog_cdc.ddl_syntax import tokenize
from sluice.connectors.source.binlog_cdc.shapes import (
    DdlError,
    parse_id,
    quoted_id,
    shape_from_document,
    table_document,
)
from sluice.connectors.source.binlog_cdc.types import TypeModes, column_type

# MariaDB 10.11's SHOW CREATE TABLE of the integration tests' every-type table.
SHOW_CREATE_TYPES = """CREATE TABLE `types` (
  `id` int(11) NOT NULL,
  `t` tinyint(4) DEFAULT NULL,
  `tu` tinyint(3) unsigned DEFAULT NULL,
  `s` smallint(6) DEFAULT NULL,
  `su` smallint(5) unsigned DEFAULT NULL,
  `m` mediumint(9) DEFAULT NULL,
  `i` int(11) DEFAULT NULL,
  `iu` int(10) unsigned DEFAULT NULL,
  `b` bigint(20) NOT NULL DEFAULT 0,
  `bu` bigint(20) unsigned DEFAULT NULL,
  `dec_` decimal(10,3) DEFAULT NULL,
  `f` float DEFAULT NULL,
  `d` double DEFAULT NULL,
  `c` char(3) DEFAULT NULL,
  `vc` varchar(20) DEFAULT NULL,
  `tx` text DEFAULT NULL,
  `bin` binary(4) DEFAULT NULL,
  `vbin` varbinary(8) DEFAULT NULL,
  `bl` blob DEFAULT NULL,
  `dt` date DEFAULT NULL,
  `dz` date NOT NULL DEFAULT '2000-01-01',
  `dtm` datetime DEFAULT NULL,
  `dtm6` datetime(6) DEFAULT NULL,
  `ts` timestamp NULL DEFAULT NULL,
  `ts3` timestamp(3) NULL DEFAULT NULL,
  `tm` time DEFAULT NULL,
  `tm6` time(6) DEFAULT NULL,
  `yr` year(4) DEFAULT NULL,
  `e` enum('small','medium','large') DEFAULT NULL,
  `st` set('a','b','c') DEFAULT NULL,
  `js` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL CHECK (json_valid(`js`)),
  `bt` bit(1) DEFAULT NULL,
  `b12` bit(12) DEFAULT NULL,
  `flag` tinyint(1) DEFAULT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"""

# What information_schema.COLUMNS says of that table: (COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, nullable,
# NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION) — CHARACTER_MAXIMUM_LENGTH checked apart.
INFORMATION_SCHEMA = [
    ("id", "int", "int(11)", False, 10, 0, None),
    ("t", "tinyint", "tinyint(4)", True, 3, 0, None),
    ("tu", "tinyint", "tinyint(3) unsigned", True, 3, 0, None),
    ("s", "smallint", "smallint(6)", True, 5, 0, None),
    ("su", "smallint", "smallint(5) unsigned", True, 5, 0, None),
    ("m", "mediumint", "mediumint(9)", True, 7, 0, None),
    ("i", "int", "int(11)", True, 10, 0, None),
    ("iu", "int", "int(10) unsigned", True, 10, 0, None),
    ("b", "bigint", "bigint(20)", False, 19, 0, None),
    ("bu", "bigint", "bigint(20) unsigned", True, 20, 0, None),
    ("dec_", "decimal", "decimal(10,3)", True, 10, 3, None),
    ("f", "float", "float", True, 12, None, None),
    ("d", "double", "double", True, 22, None, None),
    ("c", "char", "char(3)", True, None, None, None),
    ("vc", "varchar", "varchar(20)", True, None, None, None),
    ("tx", "text", "text", True, None, None, None),
    ("bin", "binary", "binary(4)", True, None, None, None),
    ("vbin", "varbinary", "varbinary(8)", True, None, None, None),
    ("bl", "blob", "blob", True, None, None, None),
    ("dt", "date", "date", True, None, None, None),
    ("dz", "date", "date", False, None, None, None),
    ("dtm", "datetime", "datetime", True, None, None, 0),
    ("dtm6", "datetime", "datetime(6)", True, None, None, 6),
    ("ts", "timestamp", "timestamp", True, None, None, 0),
    ("ts3", "timestamp", "timestamp(3)", True, None, None, 3),
    ("tm", "time", "time", True, None, None, 0),
    ("tm6", "time", "time(6)", True, None, None, 6),
    ("yr", "year", "year(4)", True, None, None, None),
    ("e", "enum", "enum('small','medium','large')", True, None, None, None),
    ("st", "set", "set('a','b','c')", True, None, None, None),
    ("js", "longtext", "longtext", True, None, None, None),
    ("bt", "bit", "bit(1)", True, 1, None, None),
    ("b12", "bit", "bit(12)", True, 12, None, None),
    ("flag", "tinyint", "tinyint(1)", True, 3, 0, None),
]


def _model(*statements: str, db: str = "shop") -> SchemaModel:
    model = SchemaModel()
    for statement in statements:
        model.apply(statement, db)
    return model


def _columns(model: SchemaModel, table: str, db: str = "shop") -> list[tuple[str, str]]:
    return [(c.name, c.column_type) for c in model.tables[(db, table)].columns]


def test_mariadbs_show_create_table_reads_as_information_schema_describes_the_table() -> None:
    shape = _model(SHOW_CREATE_TYPES).tables[("shop", "types")]
    got = [
        (c.name, c.data_type, c.column_type, c.nullable, c.precision, c.scale, c.datetime_precision)
        for c in shape.columns
    ]
    assert got == INFORMATION_SCHEMA
    assert shape.primary_key == ["id"] and shape.charset == "utf8mb4"
    by_name = {c.name: c for c in shape.columns}
    assert by_name["js"].json and not by_name["tx"].json  # MariaDB's JSON: the json_valid check
    assert (by_name["c"].length, by_name["vc"].length, by_name["bin"].length) == (3, 20, 4)
    assert by_name["b"].default == "0" and by_name["dz"].default == "2000-01-01"  # a text's value
    # Every column maps to the schema information_schema's description gives it.
    modes = TypeModes()
    for col in shape.columns:
        assert column_type(col.info(), modes) is not None, col.name


def test_create_table_as_users_write_it() -> None:
    model = _model(
        """create table if not exists `Shop`.orders ( -- the orders
             id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY COMMENT 'the key',
             "customer" varchar(64) character set latin1 not null default '',
             amount DEC(12, 2) NOT NULL DEFAULT -1.5, # money
             flag BOOLEAN DEFAULT TRUE, ratio FLOAT(30), f2 FLOAT(7,3), r REAL, dp DOUBLE PRECISION,
             code NATIONAL CHAR(2), memo LONG VARCHAR, kind ENUM('a''b', 'c\\'d', "e") NOT NULL,
             doc JSON, total INT AS (id * 2) VIRTUAL, created TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6)
               ON UPDATE CURRENT_TIMESTAMP(6),
             s SERIAL, blob_c TEXT CHARACTER SET binary, INDEX ix (customer(10) DESC), UNIQUE KEY (amount),
             CONSTRAINT fk FOREIGN KEY (id) REFERENCES other (id) ON DELETE CASCADE
           ) /*!50100 ENGINE=InnoDB */ DEFAULT CHARSET=utf8mb4 COMMENT='orders';"""
    )
    shape = model.tables[("Shop", "orders")]
    assert [(c.name, c.column_type) for c in shape.columns] == [
        ("id", "bigint unsigned"), ("customer", "varchar(64)"), ("amount", "decimal(12,2)"),
        ("flag", "tinyint(1)"), ("ratio", "double"), ("f2", "float(7,3)"), ("r", "double"), ("dp", "double"),
        ("code", "char(2)"), ("memo", "mediumtext"), ("kind", "enum('a''b','c''d','e')"), ("doc", "json"),
        ("total", "int"), ("created", "timestamp(6)"), ("s", "bigint unsigned"), ("blob_c", "blob"),
    ]  # fmt: skip
    by_name = {c.name: c for c in shape.columns}
    assert shape.primary_key == ["id"] and not by_name["id"].nullable and by_name["id"].auto_increment
    assert by_name["id"].comment == "the key" and shape.comment == "orders"
    assert (by_name["customer"].charset, by_name["memo"].charset) == ("latin1", "utf8mb4")
    assert by_name["amount"].default == "-1.5" and not by_name["kind"].nullable
    assert by_name["doc"].json and by_name["total"].generated
    assert by_name["created"].datetime_precision == 6 and by_name["created"].default == "CURRENT_TIMESTAMP(6)"


def test_a_composite_key_as_a_table_constraint_makes_its_columns_required() -> None:
    model = _model("CREATE TABLE t (a INT, b VARCHAR(3), c INT, CONSTRAINT pk PRIMARY KEY USING BTREE (b, a))")
    shape = model.tables[("shop", "t")]
    assert shape.primary_key == ["b", "a"]
    assert [c.nullable for c in shape.columns] == [False, False, True]


def test_alter_table_changes_columns_in_place() -> None:
    model = _model(
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b TEXT, c CHAR(1))",
        "ALTER TABLE t ADD COLUMN n INT UNSIGNED NOT NULL AFTER id, ADD x DATE FIRST, DROP COLUMN a, "
        "CHANGE b b2 VARCHAR(30) NOT NULL, MODIFY COLUMN c CHAR(5) AFTER x, ADD INDEX ix (n), ALGORITHM=INPLACE, "
        "LOCK=NONE",
        "ALTER TABLE t ADD (y DATETIME(3), z BIT(4)), RENAME COLUMN y TO y2, ALTER COLUMN z SET DEFAULT b'1'",
    )
    assert _columns(model, "t") == [
        ("x", "date"), ("c", "char(5)"), ("id", "int"), ("n", "int unsigned"), ("b2", "varchar(30)"),
        ("y2", "datetime(3)"), ("z", "bit(4)"),
    ]  # fmt: skip
    shape = model.tables[("shop", "t")]
    assert not shape.column("b2").nullable and shape.column("z").default == "b'1'"  # type: ignore[union-attr]


def test_primary_keys_follow_renames_drops_and_additions() -> None:
    model = _model(
        "CREATE TABLE t (id INT NOT NULL, code CHAR(2) NOT NULL, v INT)", "ALTER TABLE t ADD PRIMARY KEY (id)"
    )
    assert model.tables[("shop", "t")].primary_key == ["id"]
    model.apply("ALTER TABLE t CHANGE id ident BIGINT NOT NULL", "shop")
    assert model.tables[("shop", "t")].primary_key == ["ident"]
    model.apply("ALTER TABLE t DROP PRIMARY KEY, ADD CONSTRAINT PRIMARY KEY (code, ident)", "shop")
    assert model.tables[("shop", "t")].primary_key == ["code", "ident"]
    model.apply("ALTER TABLE t DROP COLUMN code", "shop")
    assert model.tables[("shop", "t")].primary_key == ["ident"]


def test_table_renames_drops_truncates_and_databases() -> None:
    model = _model("CREATE TABLE a (id INT)", "CREATE TABLE b (id INT)", "CREATE TABLE other.c (id INT)")
    statement = model.apply("RENAME TABLE a TO a2, shop.b TO other.b", "shop")
    assert [(c.kind, c.id, c.previous) for c in statement.changes] == [
        ("ALTER", ("shop", "a2"), ("shop", "a")), ("ALTER", ("other", "b"), ("shop", "b")),
    ]  # fmt: skip
    model.apply("ALTER TABLE a2 RENAME TO a3", "shop")
    assert set(model.tables) == {("shop", "a3"), ("other", "b"), ("other", "c")}
    assert not model.apply("TRUNCATE TABLE a3", "shop").is_ddl  # no shape changes
    dropped = model.apply("DROP TABLE IF EXISTS `a3`, nowhere /* generated by server */", "shop")
    assert [(c.kind, c.id) for c in dropped.changes] == [("DROP", ("shop", "a3"))]
    statement = model.apply("DROP DATABASE other", None)
    assert statement.databases == ["other"] and {c.id for c in statement.changes} == {("other", "b"), ("other", "c")}
    assert model.tables == {}
    assert model.apply("CREATE DATABASE IF NOT EXISTS fresh CHARACTER SET utf8mb4", None).databases == ["fresh"]


def test_create_table_like_copies_the_shape() -> None:
    model = _model("CREATE TABLE a (id INT PRIMARY KEY, v ENUM('x','y'))", "CREATE TABLE IF NOT EXISTS b LIKE a")
    assert _columns(model, "b") == _columns(model, "a") and model.tables[("shop", "b")].primary_key == ["id"]


def test_quoted_names_comments_and_executable_comments() -> None:
    model = _model("CREATE TABLE `we``ird` (`col``1` INT /* inline */, `sp ace` INT)")
    assert _columns(model, "we`ird") == [("col`1", "int"), ("sp ace", "int")]
    model.apply("/*!40000 ALTER TABLE `we``ird` */ /*M!100100 ADD COLUMN IF NOT EXISTS m INT */", "shop")
    assert [c.name for c in model.tables[("shop", "we`ird")].columns][-1] == "m"
    assert [t.text for t in tokenize("a -- comment\n b #x\n c--d")] == ["a", "b", "c", "-", "-", "d"]


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE VIEW v AS SELECT 1",
        "CREATE DEFINER=`root`@`localhost` PROCEDURE p() BEGIN SELECT 1; END",
        "GRANT SELECT ON shop.* TO 'u'@'%'",
        "SET GLOBAL x = 1",
        "FLUSH PRIVILEGES",
        "ANALYZE TABLE t",
        "CREATE TEMPORARY TABLE tmp (id INT)",
    ],
)
def test_statements_that_are_no_table_ddl_change_nothing(statement: str) -> None:
    model = _model("CREATE TABLE t (id INT)")
    before = {k: v for k, v in model.tables.items()}
    model.apply(statement, "shop")
    assert model.tables == before


@pytest.mark.parametrize(
    ("statement", "words"),
    [
        ("CREATE TABLE n AS SELECT * FROM t", "query"),
        ("CREATE TABLE n (id INT) SELECT id FROM t", "query"),
        ("ALTER TABLE missing ADD x INT", "not known"),
        ("ALTER TABLE t ADD COLUMN x FANCYTYPE", "unknown type"),
        ("ALTER TABLE t DROP COLUMN nope", "no column"),
        ("ALTER TABLE t ADD COLUMN id INT", "already"),
        ("CREATE TABLE x (id INT", "at the end"),
    ],
)
def test_a_statement_it_cannot_follow_raises_and_changes_nothing(statement: str, words: str) -> None:
    model = _model("CREATE TABLE t (id INT, v INT)")
    with pytest.raises(DdlError, match=words):
        model.apply(statement, "shop")
    assert _columns(model, "t") == [("id", "int"), ("v", "int")]


def test_a_statement_failing_half_way_leaves_the_table_as_it_was() -> None:
    model = _model("CREATE TABLE t (id INT, v INT)")
    with pytest.raises(DdlError):
        model.apply("ALTER TABLE t DROP COLUMN v, ADD w NOSUCHTYPE", "shop")
    assert _columns(model, "t") == [("id", "int"), ("v", "int")]


def test_shapes_survive_the_history_documents() -> None:
    model = _model(SHOW_CREATE_TYPES, "CREATE TABLE k (a FLOAT(7,3) ZEROFILL, b DECIMAL(5) UNSIGNED, PRIMARY KEY (a))")
    for table in (("shop", "types"), ("shop", "k")):
        shape = model.tables[table]
        back = shape_from_document(table, table_document(shape), mariadb=True)
        # A LONGTEXT marked JSON by its check alone is a LONGTEXT to Debezium's history too.
        assert [c.info() for c in back.columns] == [c.info()._replace(json=False) for c in shape.columns]
        assert (back.primary_key, back.charset) == (shape.primary_key, shape.charset)
    doc = table_document(model.tables[("shop", "types")])
    by_name = {c["name"]: c for c in doc["columns"]}
    assert by_name["iu"]["typeName"] == "INT UNSIGNED" and by_name["iu"]["jdbcType"] == 4
    assert by_name["dec_"]["length"] == 10 and by_name["dec_"]["scale"] == 3
    assert by_name["e"]["enumValues"] == ["'small'", "'medium'", "'large'"] and by_name["e"]["jdbcType"] == 1
    assert by_name["ts3"]["jdbcType"] == 2014 and by_name["ts3"]["length"] == 3
    assert by_name["id"]["position"] == 1 and by_name["id"]["optional"] is False
    assert doc["primaryKeyColumnNames"] == ["id"] and doc["defaultCharsetName"] == "utf8mb4"


def test_table_ids_are_quoted_as_debezium_writes_them() -> None:
    assert quoted_id(("shop", 'we"ird')) == '"shop"."we""ird"'
    assert parse_id('"shop"."we""ird"') == ("shop", 'we"ird') and parse_id("shop.t") == ("shop", "t")


def test_json_is_mysqls_type_or_mariadbs_longtext() -> None:
    mysql, mariadb = SchemaModel(), SchemaModel()
    mariadb.mariadb = True
    for model in (mysql, mariadb):
        model.apply("CREATE TABLE t (id INT, j JSON)", "shop")
    assert _columns(mysql, "t")[1] == ("j", "json") and _columns(mariadb, "t")[1] == ("j", "longtext")
    shape = mariadb.tables[("shop", "t")]
    assert shape.columns[1].json
    doc = table_document(shape)["columns"][1]
    assert (doc["typeName"], doc["jdbcType"], doc["charsetName"]) == ("JSON", 1111, None)  # as Debezium's parser has it
    back = shape_from_document(("shop", "t"), table_document(shape), mariadb=True)
    assert back.columns[1].info() == shape.columns[1].info()


def test_history_documents_hold_what_debeziums_parser_records() -> None:
    """Compared with Debezium 3.5's MariaDB connector on the same statement (a one-off run)."""
    model = _model(
        "CREATE TABLE t (id INT UNSIGNED NOT NULL AUTO_INCREMENT, name VARCHAR(40) NOT NULL DEFAULT 'x' COMMENT 'nm', "
        "price DECIMAL(10,2), e ENUM('a','b'), st SET('x','y','z'), flag BOOLEAN, f FLOAT(7,3), PRIMARY KEY (id))"
    )
    model.database_charset = lambda database: "utf8mb4"
    model.apply("CREATE TABLE u LIKE t", "shop")
    model.apply("CREATE TABLE v (c CHAR(2))", "shop")
    doc = table_document(model.tables[("shop", "t")])
    cols = {c["name"]: c for c in doc["columns"]}
    assert {k: cols["id"][k] for k in ("typeName", "autoIncremented", "generated", "hasDefaultValue")} == {
        "typeName": "INT UNSIGNED", "autoIncremented": True, "generated": True, "hasDefaultValue": False,
    }  # fmt: skip
    assert "length" not in cols["id"]  # no display width declared
    assert (cols["name"]["defaultValueExpression"], cols["name"]["length"]) == ("x", 40)
    assert cols["price"]["hasDefaultValue"] is True  # nullable: DEFAULT NULL
    assert (cols["e"]["enumValues"], cols["e"]["length"]) == (["'a'", "'b'"], 1)
    assert cols["st"]["length"] == 5 and cols["flag"]["typeName"] == "BOOLEAN" and cols["flag"]["jdbcType"] == 16
    assert (cols["f"]["length"], cols["f"]["scale"], cols["f"]["jdbcType"]) == (7, 3, 6)
    assert cols["price"]["enumValues"] == []
    v = table_document(model.tables[("shop", "v")])
    assert v["defaultCharsetName"] == "utf8mb4" and v["columns"][0]["charsetName"] == "utf8mb4"
