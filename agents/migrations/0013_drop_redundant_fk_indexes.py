"""Drop two indexes that a composite index already covers (each cost a b-tree write per row inserted).

`agents_step.run_id` leads the unique (run_id, index); `agents_run.owner_id` leads run_owner_created (owner_id,
created_at DESC). Only the indexes go: a plain AlterField would rebuild both tables on SQLite (dropping the usage
trigger of 0010 with them) and drop and re-validate the foreign keys on PostgreSQL.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

RUN_OWNER, STEP_RUN = "agents_run_owner_id_bc75999e", "agents_step_run_id_6ab23279"  # Django's names for them


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0012_evalrun_agent"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="run",
                    name="owner",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                migrations.AlterField(
                    model_name="step",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="agents.run",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{RUN_OWNER}"', f'CREATE INDEX "{RUN_OWNER}" ON "agents_run" ("owner_id")'
                ),
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{STEP_RUN}"', f'CREATE INDEX "{STEP_RUN}" ON "agents_step" ("run_id")'
                ),
            ],
        )
    ]
