-- The shards of shop.orders on the source server `west` of the compose profile `shards`
-- (docker compose --profile shards): the same databases, table and ids as `make demo-shards`
-- (cdc/demo_shards.py, SHARDS; tests/test_compose.py checks that they agree).  Run once by
-- the mysql image on its first start, after the signal table and the CDC user.
--
-- Every shard holds the ids 0..999, so the route's origin columns (and its column mapping,
-- region and shard) keep the shards' rows apart in the merged target.

CREATE DATABASE IF NOT EXISTS `shop_03` CHARACTER SET utf8mb4;
CREATE TABLE IF NOT EXISTS `shop_03`.`orders` (id INT PRIMARY KEY, v VARCHAR(40), n INT) CHARACTER SET utf8mb4;
INSERT INTO `shop_03`.`orders` (id, v, n)
  WITH RECURSIVE ids (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM ids WHERE i < 999)
  SELECT i, CONCAT('v', i), i FROM ids;

CREATE DATABASE IF NOT EXISTS `shop_04` CHARACTER SET utf8mb4;
CREATE TABLE IF NOT EXISTS `shop_04`.`orders` (id INT PRIMARY KEY, v VARCHAR(40), n INT) CHARACTER SET utf8mb4;
INSERT INTO `shop_04`.`orders` (id, v, n)
  WITH RECURSIVE ids (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM ids WHERE i < 999)
  SELECT i, CONCAT('v', i), i FROM ids;
