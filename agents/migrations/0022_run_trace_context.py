"""Run.trace_context: the trace a run was created in (W3C traceparent/tracestate), continued by the worker that drives
it (reactsite/observability/tracing.py).

On SQLite the column is added in place (ALTER TABLE … ADD COLUMN): Django's AddField would rebuild agents_run for a
field with a default, which drops the full-text triggers of 0021 and renumbers the rowids its index is keyed on.
Elsewhere it is Django's own AddField.
"""

from django.db import migrations, models


class AddFieldInPlace(migrations.AddField):
    """AddField; on SQLite without rebuilding the table."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "sqlite":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        field = model._meta.get_field(self.name)
        definition, params = schema_editor.column_sql(model, field)  # its type and NOT NULL
        check = field.db_parameters(connection=schema_editor.connection)["check"]
        if check:  # as the table's own columns have it: valid JSON
            definition += f" CHECK ({check})"
        quote = schema_editor.quote_name
        schema_editor.execute(
            f"ALTER TABLE {quote(model._meta.db_table)} ADD COLUMN {quote(field.column)} {definition} DEFAULT '{{}}'",
            params,
        )

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "sqlite":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        field = model._meta.get_field(self.name)
        quote = schema_editor.quote_name
        schema_editor.execute(f"ALTER TABLE {quote(model._meta.db_table)} DROP COLUMN {quote(field.column)}")


class Migration(migrations.Migration):
    dependencies = [("agents", "0021_run_search")]

    operations = [
        AddFieldInPlace(
            model_name="run",
            name="trace_context",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
