"""Date arithmetic on plain integers: days, months, weeks, business days, clock times."""

from datecalc.core import Date, add_days, days_between, is_leap_year, weekday
from datecalc.months import add_months
from datecalc.weeks import add_business_days, iso_week

__all__ = [
    "Date",
    "add_business_days",
    "add_days",
    "add_months",
    "days_between",
    "is_leap_year",
    "iso_week",
    "weekday",
]
__version__ = "0.1.0"
