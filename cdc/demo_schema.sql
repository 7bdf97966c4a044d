-- Demo schema: three tables, single integer, composite and string primary keys.
CREATE DATABASE IF NOT EXISTS shop CHARACTER SET utf8mb4;

CREATE TABLE IF NOT EXISTS shop.customers (
  id          INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  email       VARCHAR(190) NOT NULL,
  name        VARCHAR(100) NOT NULL,
  country     CHAR(2) NOT NULL,
  balance     DECIMAL(12,2) NOT NULL DEFAULT 0,
  created_at  DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS shop.order_lines (
  order_id    BIGINT NOT NULL,
  line_no     SMALLINT NOT NULL,
  sku         VARCHAR(32) NOT NULL,
  quantity    INT NOT NULL,
  price       DECIMAL(10,2) NOT NULL,
  PRIMARY KEY (order_id, line_no)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS shop.products (
  sku         VARCHAR(32) NOT NULL PRIMARY KEY,
  title       VARCHAR(200) NOT NULL,
  tags        JSON NULL,
  stock       INT NOT NULL DEFAULT 0,
  updated_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
