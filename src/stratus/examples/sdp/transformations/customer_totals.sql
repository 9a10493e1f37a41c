-- The `customer_totals` materialized view: orders and amount by customer.
CREATE MATERIALIZED VIEW customer_totals AS
SELECT customer, COUNT(*) AS orders, ROUND(SUM(amount), 2) AS amount
FROM orders
GROUP BY customer
