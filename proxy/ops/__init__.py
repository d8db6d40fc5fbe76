"""Operations: the server and its supervisor, the CLI, metrics exposition, the access log, the
cycle collector and the log outlet."""
