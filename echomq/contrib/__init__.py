"""Where Python web apps meet echomq: a Django ``django.tasks`` backend (``django``) and a
Starlette/FastAPI lifespan (``starlette``). Each imports its framework only when used."""
