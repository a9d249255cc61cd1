"""Tasks across eras: the records of long-running calls, whoever runs them."""
