"""``txnsafety demo``: the stomp lab, linted, served, hammered and reported.

* :mod:`.command`: the command line (options, the three steps, the exit status).
* :mod:`.static`: step 1, the linter's findings on the lab's handlers.
* :mod:`.load`: steps 2 and 3, real servers, concurrent clients, writes counted.
* :mod:`.timeline`: what each request read and wrote, to draw a report's race.
* :mod:`.summary`: the terminal table; :mod:`.html`: the JSON and HTML report.
* :mod:`.servers`: a threaded WSGI server and uvicorn, each in a thread.

The lab application itself is ``txnsafety_lab`` (``fixtures/stomp_lab``).
"""
