"""The overlord's leader lease (sluice_leader_leases).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table("sluice_leader_leases", sa.Column("role", sa.String(255), primary_key=True),
                    sa.Column("leader", sa.String(255), nullable=False), sa.Column("epoch", sa.BigInteger, nullable=False),
                    sa.Column("expires", sa.BigInteger, nullable=False))


def downgrade() -> None:
    op.drop_table("sluice_leader_leases")
