"""The OpenAI-compatible HTTP server `tokenrouter serve` runs over a front end (app.py), against the typed
interface of the front end it needs (frontend_api.py); it sits above the runtime, which never imports it."""
