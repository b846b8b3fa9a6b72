"""Operator state in PostgreSQL: schema, fence, zone source, site facts."""
