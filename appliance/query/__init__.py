"""DuckDB SQL over the catalog's tables, query history and result export."""
