from agents.api.urls import OptionalSlashRouter
from memory.api.views import FactViewSet

router = OptionalSlashRouter()
router.register("facts", FactViewSet, basename="fact")
urlpatterns = router.urls
