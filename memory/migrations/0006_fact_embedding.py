from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memory", "0005_fact_call_key")]

    # Nullable with no default: SQLite adds the column in place (a table rebuild would drop the FTS5 triggers).
    operations = [
        migrations.AddField(
            model_name="fact", name="embedding", field=models.BinaryField(blank=True, editable=False, null=True)
        )
    ]
