"""The memory page (SPEC 21): a person's memories, and the owner's stats, on a web page served
from the database by any process. `door` lets people in (one-time links, sessions, the rate
limit); `desk` reads and changes what the page shows through the same services as the `/memory`
commands. The HTML is the web adapter's (adapters/web/); nothing here knows HTTP."""
