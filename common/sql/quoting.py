"""MySQL/MariaDB identifier quoting: every identifier that reaches SQL text goes through here."""


def quote_ident(name: str) -> str:
    """Quote a MySQL identifier with backticks (embedded backticks doubled)."""
    if not name or "\0" in name:
        raise ValueError(f"invalid identifier {name!r}")
    return "`" + name.replace("`", "``") + "`"


def quote_table(qualified: str) -> str:
    """``db.table`` (split at the first dot) as a quoted, qualified name."""
    db, _, table = qualified.partition(".")
    return f"{quote_ident(db)}.{quote_ident(table)}"
