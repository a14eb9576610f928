"""kopf handlers, one module per kind: read, call pure logic, apply."""
