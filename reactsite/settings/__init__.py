"""Settings for reactsite, read from the environment (django-environ); docs/configuration.md says what each means.

`DJANGO_SETTINGS_MODULE=reactsite.settings` names this package. Each module holds one integration's settings, and
they are gathered here in order: a later module may build on an earlier one's values (observability puts its
middleware first and exempts /metrics from the HTTPS redirect, so it comes after base and security).
"""

# The order is meaningful (see above), so the imports are not sorted.
# isort: off
from reactsite.settings.base import *  # noqa: F403
from reactsite.settings.database import *  # noqa: F403
from reactsite.settings.background import *  # noqa: F403
from reactsite.settings.cache import *  # noqa: F403
from reactsite.settings.security import *  # noqa: F403
from reactsite.settings.api import *  # noqa: F403
from reactsite.settings.observability import *  # noqa: F403
from reactsite.settings.agents import *  # noqa: F403
from reactsite.settings.providers import *  # noqa: F403
from reactsite.settings.notifications import *  # noqa: F403
from reactsite.settings.mcp import *  # noqa: F403
from reactsite.settings.memory import *  # noqa: F403
# isort: on
