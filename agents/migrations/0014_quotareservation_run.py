"""A quota reservation names its run, so the run's next holder can drop one left by a worker that died mid-call."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0013_drop_redundant_fk_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="quotareservation",
            name="run_id",
            field=models.UUIDField(blank=True, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name="quotareservation",
            index=models.Index(fields=["run_id"], name="reservation_run"),
        ),
    ]
