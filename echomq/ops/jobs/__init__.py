"""The operator's lists of a queue's jobs by state, their pages and filters (``lists``, over the
cursors of ``pages``), and one job's story (``story``): what the dashboard's queue and job pages
read, with plain read commands only, each request bounded whatever the queue's depth."""
