"""Druid's basic security: who is asking (authenticators, the escalator's internal identity) and what they may do
(authorizers, roles, permissions on resources).

Decisions are plain functions over dataclasses (`resources`, `credentials`, `config`); the users and roles live in
the metadata store's `druid_config` table (`basic`), shared by every node; HTTP is `sluice.server.auth`.
"""
