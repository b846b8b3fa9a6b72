"""Operator verbs: assess, condense, backup."""
