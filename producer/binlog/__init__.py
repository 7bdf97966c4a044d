"""Reading the binlog: the server's checks and coordinates, the reader (in a child process),
table maps and row decoding."""
