"""The app's routes, one router per resource: :mod:`.incidents` (the incidents' API), :mod:`.shares`
(share links) and :mod:`.pages` (the HTML pages). Each module's ``router(ctx)`` builds its router
from what the app shares (:class:`server.app.AppContext`); :func:`server.app.create_app` includes them."""
