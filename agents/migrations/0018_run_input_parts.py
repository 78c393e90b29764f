from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0017_run_stop_reasons_of_unusual_replies"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="input_parts",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
