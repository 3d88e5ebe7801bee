import { describe, expect, it } from 'vitest';
import {
  addMicros,
  enumLabel,
  formatBytes,
  formatElapsed,
  formatHumanDuration,
  formatAxisMoney,
  formatMicros,
  formatMoney,
  formatTime,
  parseBytes,
  parseCpuMillis,
  parseHumanDuration,
  parseProtoDuration,
  toProtoDuration,
} from './format';

describe('money', () => {
  it('formats micros exactly with rounding half away from zero', () => {
    expect(formatMicros('1234567890')).toBe('1,234.57');
    expect(formatMicros('1234565000')).toBe('1,234.57');
    expect(formatMicros('1234564999')).toBe('1,234.56');
    expect(formatMicros('-1500000')).toBe('-1.50');
    expect(formatMicros('-4999')).toBe('0.00');
    expect(formatMicros(undefined)).toBe('0.00');
    expect(formatMicros('9007199254740993000000', 6)).toBe('9,007,199,254,740,993.000000');
    expect(formatMicros('1', 6)).toBe('0.000001');
    expect(formatMicros('500000', 0)).toBe('1');
    expect(formatMicros('not a number')).toBe('—');
  });
  it('places the currency', () => {
    expect(formatMoney({ currencyCode: 'USD', micros: '2500000' })).toBe('$2.50');
    expect(formatMoney({ currencyCode: 'USD', micros: '-2500000' })).toBe('-$2.50');
    expect(formatMoney({ currencyCode: 'CHF', micros: '1000000000' })).toBe('1,000.00 CHF');
    // proto3 JSON omits zero micros: an absent amount is zero.
    expect(formatMoney({ currencyCode: 'EUR' })).toBe('€0.00');
    expect(formatMoney(undefined, 2, 'USD')).toBe('$0.00');
  });
  it('adds micros without floating point', () => {
    expect(addMicros('100000000000000001', '2', undefined)).toBe('100000000000000003');
  });
});

describe('durations', () => {
  it('parses proto JSON durations', () => {
    expect(parseProtoDuration('1.5s')).toBe(1.5);
    expect(parseProtoDuration('3600s')).toBe(3600);
    expect(parseProtoDuration('-2s')).toBe(-2);
    expect(parseProtoDuration('0.000000001s')).toBe(1e-9);
    expect(parseProtoDuration('5m')).toBeUndefined();
    expect(parseProtoDuration(undefined)).toBeUndefined();
  });
  it('writes proto JSON durations', () => {
    expect(toProtoDuration(5400)).toBe('5400s');
    expect(toProtoDuration(1.5)).toBe('1.5s');
    expect(toProtoDuration(0)).toBe('0s');
  });
  it('parses the job YAML durations', () => {
    expect(parseHumanDuration('90s')).toBe(90);
    expect(parseHumanDuration('10m')).toBe(600);
    expect(parseHumanDuration('1h30m')).toBe(5400);
    expect(parseHumanDuration('2d')).toBe(172800);
    expect(parseHumanDuration('1.5h')).toBe(5400);
    expect(parseHumanDuration('3600')).toBe(3600);
    expect(parseHumanDuration(45)).toBe(45);
    expect(parseHumanDuration('250ms')).toBe(0.25);
    expect(parseHumanDuration('1h 30m')).toBeUndefined();
    expect(parseHumanDuration('soon')).toBeUndefined();
    expect(parseHumanDuration('')).toBeUndefined();
  });
  it('formats durations both ways', () => {
    expect(formatHumanDuration(5400)).toBe('1h30m');
    expect(formatHumanDuration(90)).toBe('1m30s');
    expect(formatHumanDuration(259200)).toBe('3d');
    expect(formatHumanDuration(0)).toBe('0s');
    expect(parseHumanDuration(formatHumanDuration(93784))).toBe(93784);
    expect(formatElapsed(5400)).toBe('1 h 30 min');
    expect(formatElapsed(42)).toBe('42 s');
    expect(formatElapsed(90061)).toBe('1 d 1 h');
  });
});

describe('units', () => {
  it('parses and formats memory', () => {
    expect(parseBytes('64Gi')).toBe(64 * 1024 ** 3);
    expect(parseBytes('512Mi')).toBe(512 * 1024 ** 2);
    expect(parseBytes('1T')).toBe(1e12);
    expect(parseBytes('1000')).toBe(1000);
    expect(parseBytes('lots')).toBeUndefined();
    expect(formatBytes(String(64 * 1024 ** 3))).toBe('64Gi');
    expect(formatBytes(1536 * 1024 ** 2)).toBe('1.5Gi');
  });
  it('parses cpus', () => {
    expect(parseCpuMillis('8')).toBe(8000);
    expect(parseCpuMillis('0.5')).toBe(500);
    expect(parseCpuMillis('500m')).toBe(500);
    expect(parseCpuMillis(2)).toBe(2000);
    expect(parseCpuMillis('x')).toBeUndefined();
  });
  it('formats times in UTC and enum labels', () => {
    expect(formatTime('2026-11-28T03:42:05Z')).toBe('2026-11-28 03:42:05 UTC');
    expect(formatTime('2026-11-28T03:42:05.123456Z')).toBe('2026-11-28 03:42:05 UTC');
    expect(formatTime(undefined)).toBe('—');
    expect(enumLabel('JOB_STATE_RUNNING', 'JOB_STATE_')).toBe('Running');
    expect(enumLabel('FAILURE_CLASS_SPOT_RECLAIM', 'FAILURE_CLASS_')).toBe('Spot reclaim');
  });
});

describe('formatAxisMoney', () => {
  it('keeps small amounts readable and large ones compact', () => {
    expect(formatAxisMoney(0, 'USD')).toBe('0 USD');
    expect(formatAxisMoney(0.0125, 'USD')).toBe('0.013 USD');
    expect(formatAxisMoney(0.5)).toBe('0.5');
    expect(formatAxisMoney(1234, 'USD')).toBe('1.2K USD');
    expect(formatAxisMoney(-0.004, 'EUR')).toBe('-0.004 EUR');
  });
});
