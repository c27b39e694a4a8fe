-- Revenue and orders per store, kept up to date incrementally as orders land.
select store, count(*) as orders, sum(amount) as revenue
from source
group by store
