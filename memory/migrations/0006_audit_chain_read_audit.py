"""The tenant audit chain (memory.audit_chain) and the read audit table.

The chain is assigned by the database so that every insert path (services, imports, fixtures,
raw SQL) is chained and no caller can pick its own position. The digest format is frozen here:
memory.audit_chain recomputes the same values in Python to verify them, so a change of format is
a new migration (and a new version string), never an edit of this one.
"""

import django.db.models.deletion
import django.db.models.manager
from django.conf import settings
from django.db import migrations, models

from tenants.db_roles import TenantRowLevelSecurity

# '~' for NULL, else '<length>:<value>': no field can run into the next one.
CHAIN_FUNCTIONS = r"""
CREATE FUNCTION ekko_audit_field(value text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN value IS NULL THEN '~' ELSE length(value)::text || ':' || value END
$$;

CREATE FUNCTION ekko_audit_content_digest(salt text, reason text, payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT encode(sha256(convert_to(
        ekko_audit_field(salt) || ekko_audit_field(reason) || ekko_audit_field(payload::text), 'UTF8')), 'hex')
$$;

CREATE FUNCTION ekko_audit_digest(e memory_memoryauditevent) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT encode(sha256(convert_to(
        ekko_audit_field('ekko-audit-v1')
        || ekko_audit_field(e.tenant_id::text)
        || ekko_audit_field(e.sequence::text)
        || ekko_audit_field(e.previous_digest)
        || ekko_audit_field(e.id::text)
        || ekko_audit_field(e.event_type)
        || ekko_audit_field(e.node_id::text)
        || ekko_audit_field(e.workspace_id::text)
        || ekko_audit_field(e.session_id)
        || ekko_audit_field(e.actor)
        || ekko_audit_field(((extract(epoch FROM e.created_at) * 1000000)::bigint)::text)
        || ekko_audit_field(e.content_digest), 'UTF8')), 'hex')
$$;

CREATE FUNCTION ekko_audit_salt() RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT replace(gen_random_uuid()::text, '-', '')
$$;
"""

DROP_CHAIN_FUNCTIONS = """
DROP FUNCTION IF EXISTS ekko_audit_salt();
DROP FUNCTION IF EXISTS ekko_audit_digest(memory_memoryauditevent);
DROP FUNCTION IF EXISTS ekko_audit_content_digest(text, text, jsonb);
DROP FUNCTION IF EXISTS ekko_audit_field(text);
"""

# Defect 7 for rows written before this migration: events of hard-forgotten nodes kept their
# reason (and sometimes payload). Erase that content, then chain every tenant's events in
# (created_at, id) order. The owner may be subject to forced RLS outside the embedded database.
BACKFILL = r"""
SELECT set_config('ekko.all_tenants', 'on', true);
-- Updating rows twice in one transaction queues their deferred foreign-key checks, and a queued
-- check forbids the ALTER TABLE that follows: check them at once instead.
SET CONSTRAINTS ALL IMMEDIATE;

UPDATE memory_memoryauditevent e SET reason = '', payload = NULL, content_salt = '-'
WHERE e.node_id IN (SELECT h.node_id FROM memory_memoryauditevent h
                    WHERE h.event_type = 'delete' AND h.payload ->> 'mode' = 'hard' AND h.tenant_id = e.tenant_id)
  AND NOT (e.event_type = 'delete' AND e.payload ->> 'mode' = 'hard');
UPDATE memory_memoryauditevent SET reason = '' WHERE event_type = 'delete' AND payload ->> 'mode' = 'hard';

DO $$
DECLARE
    e memory_memoryauditevent;
    current_tenant bigint := NULL;
    seq_no bigint := 0;
    previous text;
BEGIN
    FOR e IN SELECT * FROM memory_memoryauditevent ORDER BY tenant_id, created_at, id LOOP
        IF current_tenant IS DISTINCT FROM e.tenant_id THEN
            current_tenant := e.tenant_id;
            seq_no := 0;
            previous := repeat('0', 64);
        END IF;
        seq_no := seq_no + 1;
        e.sequence := seq_no;
        e.previous_digest := previous;
        -- Rows just erased (marked '-') keep no salt: their content is gone for good.
        e.content_salt := CASE WHEN e.content_salt = '-' THEN '' ELSE ekko_audit_salt() END;
        e.content_digest := ekko_audit_content_digest(e.content_salt, e.reason, e.payload);
        e.digest := ekko_audit_digest(e);
        UPDATE memory_memoryauditevent
        SET sequence = e.sequence, previous_digest = e.previous_digest, content_salt = e.content_salt,
            content_digest = e.content_digest, digest = e.digest
        WHERE id = e.id;
        previous := e.digest;
    END LOOP;
END
$$;

INSERT INTO memory_auditchainhead (tenant_id, sequence, digest)
SELECT DISTINCT ON (tenant_id) tenant_id, sequence, digest FROM memory_memoryauditevent
ORDER BY tenant_id, sequence DESC;
"""

# Appends for one tenant serialize on a transaction-level advisory lock (held to commit), so two
# writers can never take the same position or chain onto a head the other one replaces. The head
# is read from memory_auditchainhead once per transaction, then carried in a transaction-local
# setting, and written back once per statement: an append costs the same whatever the chain's
# length, the table statistics or the batch size (updating one row per insert would leave a
# chain of row versions that every later update of the same transaction walks).
CHAIN_TRIGGERS = r"""
CREATE FUNCTION ekko_audit_chain_append() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    setting text := 'ekko.audit_head_' || NEW.tenant_id;
    cached text;
    head_sequence bigint;
    head_digest text;
BEGIN
    PERFORM pg_advisory_xact_lock(1162562383, (NEW.tenant_id % 2147483647)::int);
    cached := current_setting(setting, true);
    IF coalesce(cached, '') = '' THEN
        SELECT sequence, digest INTO head_sequence, head_digest FROM memory_auditchainhead
        WHERE tenant_id = NEW.tenant_id;
        IF NOT FOUND THEN
            head_sequence := 0;
            head_digest := repeat('0', 64);
        END IF;
    ELSE
        head_sequence := split_part(cached, ':', 1)::bigint;
        head_digest := split_part(cached, ':', 2);
    END IF;
    NEW.sequence := head_sequence + 1;
    NEW.previous_digest := head_digest;
    NEW.content_salt := ekko_audit_salt();
    NEW.content_digest := ekko_audit_content_digest(NEW.content_salt, NEW.reason, NEW.payload);
    NEW.digest := ekko_audit_digest(NEW);
    PERFORM set_config(setting, NEW.sequence || ':' || NEW.digest, true);
    RETURN NEW;
END
$$;

CREATE FUNCTION ekko_audit_chain_head() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_auditchainhead (tenant_id, sequence, digest)
    SELECT DISTINCT ON (tenant_id) tenant_id, sequence, digest FROM appended ORDER BY tenant_id, sequence DESC
    ON CONFLICT (tenant_id) DO UPDATE SET sequence = EXCLUDED.sequence, digest = EXCLUDED.digest;
    RETURN NULL;
END
$$;

-- Tamper resistance for the application role (it cannot disable triggers): the chain fields and
-- what they cover never change; only the content may be erased, and a salt only cleared.
CREATE FUNCTION ekko_audit_chain_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.tenant_id, NEW.sequence, NEW.previous_digest, NEW.content_digest, NEW.digest,
        NEW.event_type, NEW.node_id, NEW.workspace_id, NEW.session_id, NEW.actor, NEW.created_at)
       IS DISTINCT FROM
       (OLD.id, OLD.tenant_id, OLD.sequence, OLD.previous_digest, OLD.content_digest, OLD.digest,
        OLD.event_type, OLD.node_id, OLD.workspace_id, OLD.session_id, OLD.actor, OLD.created_at) THEN
        RAISE EXCEPTION 'audit events are append-only: only their reason and payload may be erased'
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.content_salt IS DISTINCT FROM OLD.content_salt AND NEW.content_salt <> '' THEN
        RAISE EXCEPTION 'an audit event''s content salt can only be erased' USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER ekko_audit_chain_append BEFORE INSERT ON memory_memoryauditevent
    FOR EACH ROW EXECUTE FUNCTION ekko_audit_chain_append();
CREATE TRIGGER ekko_audit_chain_guard BEFORE UPDATE ON memory_memoryauditevent
    FOR EACH ROW EXECUTE FUNCTION ekko_audit_chain_guard();
CREATE TRIGGER ekko_audit_chain_head AFTER INSERT ON memory_memoryauditevent
    REFERENCING NEW TABLE AS appended FOR EACH STATEMENT EXECUTE FUNCTION ekko_audit_chain_head();
"""

DROP_CHAIN_TRIGGERS = """
DROP TRIGGER IF EXISTS ekko_audit_chain_head ON memory_memoryauditevent;
DROP TRIGGER IF EXISTS ekko_audit_chain_guard ON memory_memoryauditevent;
DROP TRIGGER IF EXISTS ekko_audit_chain_append ON memory_memoryauditevent;
DROP FUNCTION IF EXISTS ekko_audit_chain_head();
DROP FUNCTION IF EXISTS ekko_audit_chain_guard();
DROP FUNCTION IF EXISTS ekko_audit_chain_append();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0005_node_kind_index'),
        ('tenants', '0002_row_level_security'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditChainHead',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('sequence', models.BigIntegerField(default=0)),
                ('digest', models.CharField(max_length=64)),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('tenant',), name='audit_head_tenant_uniq')],
            },
            managers=[
                ('objects', django.db.models.manager.Manager()),
                ('all_tenants', django.db.models.manager.Manager()),
            ],
        ),
        TenantRowLevelSecurity('memory_auditchainhead'),
        migrations.CreateModel(
            name='MemoryReadEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('node_id', models.UUIDField()),
                ('actor', models.CharField(help_text='api_key:<prefix> or user:<username>', max_length=200)),
                ('endpoint', models.CharField(choices=[('memory/search', 'Memory Search'), ('memory/get', 'Memory Get'), ('memory/nodes/{id}', 'Memory Node'), ('context', 'Context'), ('history', 'History'), ('pages', 'Pages'), ('other', 'Other')], max_length=32)),
                ('created_at', models.DateTimeField()),
            ],
            managers=[
                ('objects', django.db.models.manager.Manager()),
                ('all_tenants', django.db.models.manager.Manager()),
            ],
        ),
        migrations.AddField(
            model_name='memoryauditevent',
            name='content_digest',
            field=models.CharField(db_default='', editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name='memoryauditevent',
            name='content_salt',
            field=models.CharField(db_default='', editable=False, help_text='Random per event; erased with the content.', max_length=32),
        ),
        migrations.AddField(
            model_name='memoryauditevent',
            name='digest',
            field=models.CharField(db_default='', editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name='memoryauditevent',
            name='previous_digest',
            field=models.CharField(db_default='', editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name='memoryauditevent',
            name='sequence',
            field=models.BigIntegerField(db_default=0, editable=False, help_text='Position in the tenant chain.'),
        ),
        migrations.AlterField(
            model_name='memoryauditevent',
            name='event_type',
            field=models.CharField(choices=[('create', 'Create'), ('update', 'Update'), ('supersede', 'Supersede'), ('expire', 'Expire'), ('delete', 'Delete'), ('restore', 'Restore'), ('erase', 'Erase')], max_length=16),
        ),
        migrations.RunSQL(CHAIN_FUNCTIONS, DROP_CHAIN_FUNCTIONS),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name='memoryauditevent',
            constraint=models.UniqueConstraint(fields=('tenant', 'sequence'), name='audit_tenant_sequence_uniq'),
        ),
        migrations.RunSQL(CHAIN_TRIGGERS, DROP_CHAIN_TRIGGERS),
        migrations.AddField(
            model_name='memoryreadevent',
            name='api_key',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='tenants.apikey'),
        ),
        migrations.AddField(
            model_name='memoryreadevent',
            name='tenant',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant'),
        ),
        migrations.AddField(
            model_name='memoryreadevent',
            name='user',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddIndex(
            model_name='memoryreadevent',
            index=models.Index(fields=['tenant', 'node_id', 'created_at'], name='read_node_time_idx'),
        ),
        migrations.AddIndex(
            model_name='memoryreadevent',
            index=models.Index(fields=['tenant', 'created_at'], name='read_tenant_time_idx'),
        ),
        migrations.AddIndex(
            model_name='memoryreadevent',
            index=models.Index(fields=['tenant', 'actor', 'created_at'], name='read_actor_time_idx'),
        ),
        TenantRowLevelSecurity('memory_memoryreadevent'),
    ]
