-- Idle cost (docs/accounting.md, "Idle cost"): what each pool (flavor) held, as exact
-- intervals kept by a trigger on `nodes`, and the idle lines the meter computes from them for
-- every closed UTC hour (paid, allocated, idle = paid - allocated; and each tenant's share of
-- the idle cost when it is shared by use).

-- --- Reading a node's capacity from its body ---
-- A node's body is a serialized trainyard.v1.Node; its capacity is field 3 (Resources: gpus
-- field 1, cpu_millis field 3, memory_bytes field 4, all varints). These functions read the
-- protobuf wire format, so that the capacity history is kept in the database, by one trigger,
-- whatever writes the nodes.

-- The varint at byte `pos` (from 0) of `body`, as a signed 64-bit value, and the position after
-- it. A truncated varint raises (get_byte out of range).
CREATE FUNCTION pb_varint(body bytea, pos int, OUT value numeric, OUT next int)
  LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  b int;
  mul numeric := 1;
BEGIN
  value := 0;
  next := pos;
  LOOP
    b := get_byte(body, next);
    next := next + 1;
    value := value + (b & 127) * mul;
    EXIT WHEN b < 128;
    mul := mul * 128;
  END LOOP;
  IF value >= 9223372036854775808 THEN
    value := value - 18446744073709551616;
  END IF;
END $$;

-- The position after the value of a field of wire type `wire` that starts at `pos`.
CREATE FUNCTION pb_skip(body bytea, pos int, wire int) RETURNS int
  LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v record;
BEGIN
  CASE wire
    WHEN 0 THEN SELECT * INTO v FROM pb_varint(body, pos); RETURN v.next;
    WHEN 1 THEN RETURN pos + 8;
    WHEN 2 THEN SELECT * INTO v FROM pb_varint(body, pos); RETURN v.next + v.value::int;
    WHEN 5 THEN RETURN pos + 4;
    ELSE RAISE EXCEPTION 'protobuf wire type % is not supported', wire;
  END CASE;
END $$;

-- The capacity of a trainyard.v1.Node body (0 for a field not set; a Resources message sent
-- in several parts is merged, the last value of a field winning, as protobuf parsers do).
CREATE FUNCTION node_body_capacity(body bytea, OUT gpus bigint, OUT cpu_millis bigint,
                                   OUT memory_bytes bigint)
  LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  n int := length(body);
  pos int := 0;
  sub int;
  sub_end int;
  t record;
  v record;
BEGIN
  gpus := 0;
  cpu_millis := 0;
  memory_bytes := 0;
  WHILE pos < n LOOP
    SELECT * INTO t FROM pb_varint(body, pos);
    pos := t.next;
    IF t.value = 26 THEN  -- field 3, length-delimited: capacity
      SELECT * INTO v FROM pb_varint(body, pos);
      sub := v.next;
      sub_end := v.next + v.value::int;
      pos := sub_end;
      WHILE sub < sub_end LOOP
        SELECT * INTO t FROM pb_varint(body, sub);
        sub := t.next;
        IF t.value IN (8, 24, 32) THEN  -- fields 1, 3, 4 as varints
          SELECT * INTO v FROM pb_varint(body, sub);
          sub := v.next;
          IF t.value = 8 THEN
            gpus := v.value;
          ELSIF t.value = 24 THEN
            cpu_millis := v.value;
          ELSE
            memory_bytes := v.value;
          END IF;
        ELSE
          sub := pb_skip(body, sub, (t.value % 8)::int);
        END IF;
      END LOOP;
    ELSE
      pos := pb_skip(body, pos, (t.value % 8)::int);
    END IF;
  END LOOP;
END $$;

-- --- The idle pass's state ---
-- Every closed hour before computed_until_ms has its idle lines, except the hours in
-- idle_dirty_hours (a line of theirs was written or deleted after they were computed). A change
-- that alters what a computed hour paid (a node change, a price added) lowers
-- computed_until_ms to its hour. The history starts here: idle lines exist from the hour this
-- migration ran (earlier capacity is not known).
CREATE TABLE idle_state (
  id                smallint PRIMARY KEY CHECK (id = 1),
  computed_until_ms bigint NOT NULL
);
INSERT INTO idle_state
  SELECT 1, e - e % 3600000 FROM (SELECT floor(extract(epoch FROM now()) * 1000)::bigint AS e) x;
CREATE TABLE idle_dirty_hours (period_start_ms bigint PRIMARY KEY);

-- --- Capacity history ---
-- What each node holds, as the trigger last saw it (so that a delete, even by a cascade that
-- has already removed the node's pool, knows what to take away).
CREATE TABLE node_capacity (
  cluster      text NOT NULL,
  id           text NOT NULL,
  flavor       text NOT NULL,
  gpus         bigint NOT NULL,
  cpu_millis   bigint NOT NULL,
  memory_bytes bigint NOT NULL,
  PRIMARY KEY (cluster, id)
);

-- What a flavor's nodes held together over [start_ms, end_ms) (end_ms NULL: still held). The
-- intervals of a flavor tile time from its first node on, without gaps or overlaps.
CREATE TABLE pool_capacity (
  flavor       text NOT NULL,
  start_ms     bigint NOT NULL,
  end_ms       bigint CHECK (end_ms IS NULL OR end_ms > start_ms),
  nodes        integer NOT NULL,
  gpus         bigint NOT NULL,
  cpu_millis   bigint NOT NULL,
  memory_bytes bigint NOT NULL,
  PRIMARY KEY (flavor, start_ms)
);
CREATE UNIQUE INDEX pool_capacity_open ON pool_capacity (flavor) WHERE end_ms IS NULL;

-- The instant of a node change: the session setting trainyard.capacity_change_ms when set (a
-- test or a replay that runs on a simulated clock sets it with SET LOCAL), else the database's
-- clock.
CREATE FUNCTION capacity_change_ms() RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT coalesce(nullif(current_setting('trainyard.capacity_change_ms', true), '')::bigint,
                  floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) $$;

-- Adds a change of a flavor's capacity at `at_ms`: closes its open interval there and opens
-- one with the new sums (or changes the open one in place when it starts at that instant).
-- Changes of a flavor take turns (an advisory lock per flavor); one stamped before the open
-- interval's start (a clock that went back) is applied at that start.
CREATE FUNCTION pool_capacity_add(f text, at_ms bigint, d_nodes int, d_gpus bigint,
                                  d_cpu bigint, d_mem bigint) RETURNS void
  LANGUAGE plpgsql AS $$
DECLARE
  cur pool_capacity%ROWTYPE;
  t bigint;
  cursor_ms bigint;
BEGIN
  IF d_nodes = 0 AND d_gpus = 0 AND d_cpu = 0 AND d_mem = 0 THEN
    RETURN;
  END IF;
  PERFORM pg_advisory_xact_lock(1954112353, hashtext(f));  -- 'tyca'
  -- The open interval is the flavor's latest (a backward scan of the primary key: one row,
  -- however long the history).
  SELECT * INTO cur FROM pool_capacity WHERE flavor = f ORDER BY start_ms DESC LIMIT 1;
  IF NOT FOUND OR cur.end_ms IS NOT NULL THEN
    t := at_ms;
    INSERT INTO pool_capacity VALUES (f, t, NULL, d_nodes, d_gpus, d_cpu, d_mem);
  ELSE
    t := greatest(at_ms, cur.start_ms);
    IF t = cur.start_ms THEN
      UPDATE pool_capacity SET nodes = nodes + d_nodes, gpus = gpus + d_gpus,
                               cpu_millis = cpu_millis + d_cpu, memory_bytes = memory_bytes + d_mem
        WHERE flavor = f AND start_ms = t;
    ELSE
      UPDATE pool_capacity SET end_ms = t WHERE flavor = f AND start_ms = cur.start_ms;
      INSERT INTO pool_capacity VALUES (f, t, NULL, cur.nodes + d_nodes, cur.gpus + d_gpus,
                                        cur.cpu_millis + d_cpu, cur.memory_bytes + d_mem);
    END IF;
  END IF;
  -- If the idle lines of its hour are computed already, they are computed again. The row is
  -- locked unconditionally: an idle pass holds it (FOR UPDATE) from its reads to its commit, so
  -- a change either commits before the pass reads, or waits and then sees the cursor the pass
  -- wrote. FOR SHARE, so that node changes do not wait for each other.
  SELECT computed_until_ms INTO cursor_ms FROM idle_state FOR SHARE;
  IF t - t % 3600000 < cursor_ms THEN
    UPDATE idle_state SET computed_until_ms = t - t % 3600000;
  END IF;
END $$;

-- "Held" is every node that exists, whatever its state: a cloud bills a node while it exists,
-- drained, cordoned or down. The history moves when a node is added or removed, changes
-- capacity or moves to a pool of another flavor; other updates (state, labels, report time)
-- change nothing.
CREATE FUNCTION nodes_capacity_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  at_ms bigint := capacity_change_ms();
  old_cap node_capacity%ROWTYPE;
  new_flavor text;
  c record;
BEGIN
  IF TG_OP = 'DELETE' THEN
    SELECT * INTO old_cap FROM node_capacity WHERE cluster = OLD.cluster AND id = OLD.id;
    IF old_cap.flavor IS NOT NULL THEN
      DELETE FROM node_capacity WHERE cluster = OLD.cluster AND id = OLD.id;
      PERFORM pool_capacity_add(old_cap.flavor, at_ms, -1, -old_cap.gpus, -old_cap.cpu_millis,
                                -old_cap.memory_bytes);
    END IF;
    RETURN NULL;
  END IF;
  SELECT * INTO old_cap FROM node_capacity WHERE cluster = NEW.cluster AND id = NEW.id;
  SELECT flavor INTO new_flavor FROM pools WHERE cluster = NEW.cluster AND id = NEW.pool;
  SELECT * INTO c FROM node_body_capacity(NEW.body);
  IF old_cap.flavor IS NOT DISTINCT FROM new_flavor AND old_cap.gpus = c.gpus
     AND old_cap.cpu_millis = c.cpu_millis AND old_cap.memory_bytes = c.memory_bytes THEN
    RETURN NULL;
  END IF;
  INSERT INTO node_capacity VALUES (NEW.cluster, NEW.id, new_flavor, c.gpus, c.cpu_millis,
                                    c.memory_bytes)
    ON CONFLICT (cluster, id) DO UPDATE SET flavor = EXCLUDED.flavor, gpus = EXCLUDED.gpus,
      cpu_millis = EXCLUDED.cpu_millis, memory_bytes = EXCLUDED.memory_bytes;
  IF old_cap.flavor IS NOT DISTINCT FROM new_flavor THEN
    PERFORM pool_capacity_add(new_flavor, at_ms, 0, c.gpus - old_cap.gpus,
                              c.cpu_millis - old_cap.cpu_millis,
                              c.memory_bytes - old_cap.memory_bytes);
  ELSE
    IF old_cap.flavor IS NOT NULL THEN
      PERFORM pool_capacity_add(old_cap.flavor, at_ms, -1, -old_cap.gpus, -old_cap.cpu_millis,
                                -old_cap.memory_bytes);
    END IF;
    PERFORM pool_capacity_add(new_flavor, at_ms, 1, c.gpus, c.cpu_millis, c.memory_bytes);
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER nodes_capacity AFTER INSERT OR UPDATE OR DELETE ON nodes
  FOR EACH ROW EXECUTE FUNCTION nodes_capacity_trigger();

-- The nodes already there: held from this migration on.
INSERT INTO node_capacity
  SELECT n.cluster, n.id, p.flavor, c.gpus, c.cpu_millis, c.memory_bytes
  FROM nodes n JOIN pools p ON p.cluster = n.cluster AND p.id = n.pool,
       LATERAL node_body_capacity(n.body) c;
INSERT INTO pool_capacity
  SELECT flavor, (SELECT computed_until_ms FROM idle_state), NULL, count(*), sum(gpus),
         sum(cpu_millis), sum(memory_bytes)
  FROM node_capacity GROUP BY flavor;

-- --- Idle lines ---
-- One per flavor and closed UTC hour in which the flavor held capacity or had a commitment
-- (pricing::ComputeIdle): paid = allocated + idle, to the micro.
CREATE TABLE idle_lines (
  period_start_ms  bigint NOT NULL,
  flavor           text NOT NULL,
  reserved         boolean NOT NULL,
  paid_micros      bigint NOT NULL,
  allocated_micros bigint NOT NULL,
  idle_micros      bigint NOT NULL,
  spot_price_gap   boolean NOT NULL,
  PRIMARY KEY (period_start_ms, flavor),
  CHECK (paid_micros - allocated_micros = idle_micros)
);
-- Each tenant's share of an idle line, by its allocated cost (pricing::ShareIdle); the shares
-- of a line sum to its idle_micros, and a line without usage has none.
CREATE TABLE idle_shares (
  period_start_ms bigint NOT NULL,
  flavor          text NOT NULL,
  tenant          text NOT NULL,
  micros          bigint NOT NULL,
  PRIMARY KEY (period_start_ms, flavor, tenant),
  FOREIGN KEY (period_start_ms, flavor) REFERENCES idle_lines ON DELETE CASCADE
);
