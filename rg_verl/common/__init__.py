"""What every room shares, importing none: the schema, the names spelled once, text conventions, atomic writes."""
