"""The organizer (seed 001): scan → cluster → plan → gate → apply over one scope owner's cards.

`cluster`, `plan` and `gate` are pure (no ORM); `runs` drives a run and `memory.services.organize`
writes its decisions through the write rules.
"""
